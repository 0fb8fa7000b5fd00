# -*- coding: utf-8 -*-
"""DeepSeek sparse attention's lightning indexer in the engine's accounting (engine_memory): the prefill gather
buffer its profile run reserves, the logits it allocates beside it, and the decode logits its full CUDA graphs keep.
The model is GLM-5.2-NVFP4 as the corpus keeps it (its published config.json)."""
import os
import sys

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402  pylint: disable=wrong-import-position

MIB = 1024 * 1024
GLM52_ID = "moe-glm52-nvfp4-gb200-tp4-ep-v0260-819k"
GLM52_CASE = next(c for c in kv_accuracy.load_cases(kv_accuracy.CASES) if c["id"] == GLM52_ID)
GLM52 = model_profile(GLM52_CASE["model"]["config"])
LENGTH = 819200
ENTRY = 128 + 4          # index_head_dim fp8 values and one fp32 scale


def engine(version, **more):
    return dict({"version": version, "max_model_len": LENGTH, "max_num_batched_tokens": 8192, "max_num_seqs": 1024,
                 "gpu_name": "NVIDIA GB200", "expert_parallel": True}, **more)


@pytest.mark.parametrize("version, kept, per_call", [
    ("0.12.0", 0, 2 * ENTRY * 2 * LENGTH),           # 2 entries a token and their contiguous copy, for the call alone
    ("0.13.0", 40 * ENTRY * LENGTH, 0),              # 40 entries a token, kept by the workspace manager
    ("0.19.0", 40 * ENTRY * LENGTH, 512 * MIB),      # and a 512 MiB stand-in for the prefill's logits
    ("0.26.0", 40 * ENTRY * LENGTH, 512 * MIB),
])
def test_the_indexer_s_profile_buffers_follow_the_release(version, kept, per_call):
    assert engine_memory.indexer_workspace_parts(GLM52, engine(version)) == (kept, per_call)


def test_from_0_34_the_logits_stand_in_covers_one_decode_step():
    """0.34 reserves the larger of the 512 MiB prefill budget and a decode step's fp32 logits: min(seqs, batched
    tokens) x (1 + drafts) rows, each padded to 768 positions on SM 10.x (256 elsewhere), chunked within 2 GiB there."""
    hopper = engine("0.34.0", gpu_name="NVIDIA H200", max_model_len=202752)
    rows_bytes = 1024 * 202752 * 4                              # 202752 is a multiple of 256
    assert engine_memory.indexer_workspace_parts(GLM52, hopper)[1] == rows_bytes
    mtp = dict(hopper, speculative_method="mtp", num_speculative_tokens=3)
    assert engine_memory.indexer_workspace_parts(GLM52, mtp)[1] == 4 * rows_bytes      # no cap on Hopper
    blackwell = dict(mtp, gpu_name="NVIDIA B200")
    padded = -(-202752 // 768) * 768
    assert engine_memory.indexer_workspace_parts(GLM52, blackwell)[1] == (2048 * MIB // (4 * 202752)) * padded * 4
    # a short context or few requests leave the prefill budget the larger; 0.33 reserves that alone
    assert engine_memory.indexer_workspace_parts(GLM52, dict(hopper, max_num_seqs=64))[1] == 512 * MIB
    assert engine_memory.indexer_workspace_parts(GLM52, dict(mtp, version="0.33.0"))[1] == 512 * MIB
    # rows are the smaller of the requests and the batch; a row pads to 256 positions on Hopper
    odd = dict(hopper, max_model_len=200001, max_num_batched_tokens=768)
    assert engine_memory.indexer_workspace_parts(GLM52, odd)[1] == 768 * (-(-200001 // 256) * 256) * 4


def test_deepseek_v32_s_bf16_indexer_logits_on_sm100_from_0_34():
    """DeepSeek-V3.2 and V4 take bf16 indexer logits on SM 10.x (models/config.py
    _set_deepseek_indexer_logits_dtype): rows pad to lcm(384, 512) = 1536 positions, two bytes each, chunked within
    2 GiB; the prefill budget takes its bf16 logits and their fp32 copy, 768 MiB. GLM-5 keeps fp32."""
    v32 = dict(GLM52, architecture="DeepseekV32ForCausalLM")
    blackwell = engine("0.34.0", gpu_name="NVIDIA B200", max_model_len=163840)
    padded = -(-163840 // 1536) * 1536
    assert engine_memory.indexer_workspace_parts(v32, blackwell)[1] == max(768 * MIB, 1024 * padded * 2)
    assert engine_memory.indexer_workspace_parts(v32, dict(blackwell, max_num_seqs=8))[1] == 768 * MIB
    mtp = dict(blackwell, speculative_method="mtp", num_speculative_tokens=3)
    assert engine_memory.indexer_workspace_parts(v32, mtp)[1] == 4096 * padded * 2
    many = dict(mtp, max_num_seqs=2048, max_num_batched_tokens=16384)          # 8192 rows, beyond the 2 GiB chunk
    assert engine_memory.indexer_workspace_parts(v32, many)[1] == (2048 * MIB // (2 * 163840)) * padded * 2
    glm = -(-163840 // 768) * 768
    assert engine_memory.indexer_workspace_parts(GLM52, blackwell)[1] == 1024 * glm * 4
    # without the batch settings the prefill budget alone; no positions, no rows
    assert engine_memory.indexer_logits_standin_bytes(v32, 163840, {"gpu_name": "NVIDIA B200"}) == 768 * MIB
    assert engine_memory.indexer_logits_standin_bytes(GLM52, 0, blackwell) == 512 * MIB


def test_models_without_an_indexer_reserve_nothing_and_v4_divides_by_its_compress_ratio():
    dense_mla = dict(GLM52, mla=dict(GLM52["mla"], indexer=None))
    assert engine_memory.indexer_workspace_parts(dense_mla, engine("0.26.0")) == (0, 0)
    v4 = dict(dense_mla, compressed_attention={"ratios": [0, 4, 128], "index_head_dim": 128})
    assert engine_memory.indexer_workspace_parts(v4, engine("0.26.0"))[0] == 40 * ENTRY * LENGTH // 4


FP8_EXPERTS = dict(GLM52, quantization={"method": "fp8", "bits": 8, "weight_type": "float", "block_size": [128, 128]})


@pytest.mark.parametrize("experts, attention, loaded, growth", [
    (3, 5, 0, (3, 2)),      # one buffer, sized to the largest request: the attention's beyond the experts'
    (5, 3, 0, (5, 0)),
    (2, 5, 4, (0, 5)),      # a load-time reservation stays pinned: a larger request is a whole new buffer
    (5, 2, 4, (5, 0)),
    (3, 2, 4, (0, 0)),      # within it, nothing grows
])
def test_the_shared_workspace_grows_once_to_the_largest_request(experts, attention, loaded, growth):
    assert engine_memory.shared_workspace_growth(experts, attention, loaded) == growth


def test_the_indexer_s_buffer_counts_beyond_the_experts_one():
    """Triton's fp8 experts keep 1.5 GiB in the same manager on an H200 (a bf16 cache: no FlashMLA reservation)."""
    settings = engine("0.26.0", gpu_name="NVIDIA H200", kv_dtype_bytes=2)
    experts_kept = engine_memory.moe_workspace_parts(FP8_EXPERTS, 4, settings)[0]
    assert experts_kept > 0
    lines = engine_memory.overhead(FP8_EXPERTS, 4, settings)
    assert lines["attention_workspace"] == 40 * ENTRY * LENGTH - experts_kept


def test_hopper_s_flashmla_reservation_is_made_while_the_model_loads():
    """A packed fp8 latent on SM 9.0 runs FlashMLA's sparse backend, which reserves 5 latents a max_model_len token
    and its query buffer while the model is built: the profile's requests fit within it."""
    settings = engine("0.26.0", gpu_name="NVIDIA H200", kv_dtype_bytes=1)
    loaded = engine_memory.sparse_mla_load_workspace_bytes(FP8_EXPERTS, 4, settings)
    assert loaded == (512 + 64) * 2 * (5 * LENGTH + 8192 * 16)
    lines = engine_memory.overhead(FP8_EXPERTS, 4, settings)
    assert lines["attention_workspace"] == lines["moe_workspace"] == 0
    assert engine_memory.sparse_mla_load_workspace_bytes(FP8_EXPERTS, 4, dict(settings, kv_dtype_bytes=2)) == 0
    assert engine_memory.sparse_mla_load_workspace_bytes(FP8_EXPERTS, 4, dict(settings, gpu_name="NVIDIA B200")) == 0
    case = dict(GLM52_CASE, gpu=dict(GLM52_CASE["gpu"], name="NVIDIA H200", memory_gib=139.81))
    on_a_host = kv_accuracy.predict(case)["budget_bytes"]          # weights from the checkpoint: loading adds it
    as_loaded = kv_accuracy.predict(case, weights_from_log=True)["budget_bytes"]
    assert on_a_host["weights_padding"] == engine_memory.sparse_mla_load_workspace_bytes(
        GLM52, 4, engine("0.26.0", gpu_name="NVIDIA H200", kv_dtype_bytes=1)) + engine_memory.rope_table_bytes(GLM52, 2)
    assert as_loaded["weights_padding"] == 0                         # inside "Model loading took"


def test_full_decode_graphs_keep_the_indexer_s_logits():
    assert engine_memory.indexer_decode_logits_bytes(GLM52, engine("0.26.0")) == 4 * 512 * LENGTH
    # the largest full graph is a capture size: 96 tokens for 100 sequences
    assert engine_memory.indexer_decode_logits_bytes(GLM52, engine("0.26.0", max_num_seqs=100)) == 4 * 96 * LENGTH
    spec = engine("0.26.0", max_num_seqs=128, num_speculative_tokens=1, speculative_method="mtp")
    assert engine_memory.indexer_decode_logits_bytes(GLM52, spec) == 4 * 256 * LENGTH   # 2 tokens a request
    dense_mla = dict(GLM52, mla=dict(GLM52["mla"], indexer=None))
    assert engine_memory.indexer_decode_logits_bytes(dense_mla, engine("0.26.0")) == 0
    v4 = dict(dense_mla, compressed_attention={"ratios": [0, 4, 128], "index_head_dim": 128})
    assert engine_memory.indexer_decode_logits_bytes(v4, engine("0.26.0")) == 0     # an eager break in its graphs


def test_the_calibration_key_names_the_indexer_s_max_model_len():
    assert "indexer=819200" in engine_memory.overhead_config_key(engine("0.26.0"), GLM52)
    dense_mla = dict(GLM52, mla=dict(GLM52["mla"], indexer=None))
    assert "indexer" not in engine_memory.overhead_config_key(engine("0.26.0"), dense_mla)


def test_the_glm52_start_is_predicted_line_by_line():
    """A public v0.26.0 start on 4 x GB200 at 819200 tokens printed 6.31 GiB of peak activation and 50.62 GiB of KV
    cache (1,139,456 tokens); without the indexer's buffers the budget read 5.9 GiB over. The logits stand-in is freed
    before the experts run, so it adds no experts' share."""
    table = kv_accuracy.predict(GLM52_CASE, weights_from_log=True)["budget_bytes"]
    peak = (table["activation_peak"] + table["moe_workspace"] + table["attention_workspace"]) / 2 ** 30
    assert abs(peak - 6.31) <= 0.05 and table["moe_workspace"] == 0
    assert abs(table["kv_available"] / 2 ** 30 - 50.62) <= 0.5
    assert abs(table["kv_cache_tokens"] - 1139456) <= 0.05 * 1139456


def test_a_piecewise_capture_keeps_the_indexer_s_logits_stand_in():
    """Captured without attention metadata, the indexer allocates its prefill stand-in again; the allocator keeps it
    from the first piecewise capture on, once in the estimate."""
    sizes = [1, 2, 4, 8]
    assert engine_memory.indexer_piecewise_standin_bytes(GLM52, engine("0.26.0"), sizes) == 512 * MIB
    assert engine_memory.indexer_piecewise_standin_bytes(GLM52, engine("0.18.0"), sizes) == 0      # before the stand-in
    assert engine_memory.indexer_piecewise_standin_bytes(GLM52, engine("0.26.0"), []) == 0         # no piecewise graph
    dense_mla = dict(GLM52, mla=dict(GLM52["mla"], indexer=None))
    assert engine_memory.indexer_piecewise_standin_bytes(dense_mla, engine("0.26.0"), sizes) == 0
    # 0.34: the prefill budget alone (no scheduler config in a capture), bf16 logits and an fp32 copy for V3.2 on SM 10.x
    v32 = dict(GLM52, architecture="DeepseekV32ForCausalLM")
    assert engine_memory.indexer_piecewise_standin_bytes(v32, engine("0.34.0", gpu_name="NVIDIA B200"), sizes) == 768 * MIB
    with_graphs = engine_memory.cudagraph_bytes(GLM52, 4, engine("0.26.0"))
    assert with_graphs - engine_memory.cudagraph_bytes(GLM52, 4, engine("0.18.0")) >= 512 * MIB


def test_deepseek_v4_s_attention_takes_no_flashinfer_workspace():
    """DeepSeek-V4's layers run sparse MLA (FlashMLA; FlashInfer's sparse MLA on SM 12.x), not FlashInfer's paged
    attention, whose workspace the graph estimate would otherwise take on SM 10.x."""
    compressed = {"ratios": [0, 4, 128], "index_head_dim": 128, "window": 128, "head_dim": 512}
    v4 = dict(GLM52, mla=None, compressed_attention=compressed)
    blackwell = engine("0.25.1", gpu_name="NVIDIA B200")
    assert engine_memory.attention_backend(v4, blackwell) == engine_memory.MLA_BACKEND
    assert engine_memory.flashinfer_workspace_bytes(v4, 1, blackwell) == 0


DSV2_LITE_ID = "moe-deepseek-v2-lite-h100-tp1-v0190"
DSV2_LITE = model_profile(next(c for c in kv_accuracy.load_cases(kv_accuracy.CASES)
                               if c["id"] == DSV2_LITE_ID)["model"]["config"])


def test_flashattention_mla_keeps_its_split_accumulators_in_the_first_full_graph():
    """DeepSeek-V2-Lite (dense MLA, 16 heads, kv_lora_rank 512) on an H100: FLASH_ATTN_MLA's 32-way split of the
    512-token full graph keeps fp32 [32, heads, 512, 512 + 1] (513 MiB at TP 1; the v0.19.0 DEBUG log prints a 522 MiB
    first full capture); the heads split by TP; none with an fp8 cache (another backend), off SM 9.x, for a
    backend the run names, or before 0.19."""
    hopper = {"version": "0.19.0", "gpu_name": "NVIDIA H100 80GB HBM3"}
    full = [8, 512]
    assert engine_memory.fa_mla_split_accumulator_bytes(DSV2_LITE, 1, hopper, full) == 32 * 16 * 512 * 513 * 4
    assert engine_memory.fa_mla_split_accumulator_bytes(DSV2_LITE, 4, hopper, full) == 32 * 4 * 512 * 513 * 4
    for other in ({"kv_dtype_bytes": 1}, {"gpu_name": "NVIDIA A100-SXM4-80GB"}, {"attention_backend": "FLASHMLA"},
                  {"version": "0.18.0"}):
        assert engine_memory.fa_mla_split_accumulator_bytes(DSV2_LITE, 1, dict(hopper, **other), full) == 0
    assert engine_memory.fa_mla_split_accumulator_bytes(DSV2_LITE, 1, hopper, []) == 0
    assert engine_memory.fa_mla_split_accumulator_bytes(GLM52, 4, hopper, full) == 0          # sparse MLA
    settings = dict(hopper, max_num_seqs=1024, max_num_batched_tokens=8192)
    assert engine_memory.cudagraph_bytes(DSV2_LITE, 1, settings) - engine_memory.cudagraph_bytes(
        DSV2_LITE, 1, dict(settings, kv_dtype_bytes=1)) > 400 * MIB
