# -*- coding: utf-8 -*-
"""A multimodal model's vision tower in the profile run: its shape read from config.json, the dummy batch vLLM
profiles, and what it adds to the torch peak (engine_memory.encoder_profile_bytes)."""
import json

import pytest

import sample_checkpoints

from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.budget import GIB, plan
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile, with_preprocessor_pixels
from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights

# Qwen/Qwen2.5-VL-7B-Instruct's config.json (the published values).
QWEN25_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "max_position_embeddings": 128000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
}
# Qwen/Qwen3-VL-30B-A3B-Instruct's (text_config nested, deepstack towers).
QWEN3_VL_30B = {
    "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe", "tie_word_embeddings": False,
    "text_config": {"model_type": "qwen3_vl_moe_text", "hidden_size": 2048, "intermediate_size": 6144,
                    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                    "vocab_size": 151936, "max_position_embeddings": 262144, "dtype": "bfloat16"},
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "deepstack_visual_indexes": [8, 16, 24]},
}
LLAVA = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "hidden_size": 4096,
         "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32064,
         "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024}}


def engine(**extra):
    return dict({"version": "0.23.0", "max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_model_len": 128000},
                **extra)


def test_vision_towers_are_read_with_their_own_field_names():
    qwen25 = model_profile(QWEN25_VL_7B)["vision"]
    assert (qwen25["family"], qwen25["hidden_size"], qwen25["intermediate_size"], qwen25["gated_mlp"]) == (
        "qwen2_5_vl", 1280, 3420, True)
    assert (qwen25["image_max_pixels"], qwen25["head_dim"], qwen25["out_hidden_size"]) == (12845056, 80, 3584)
    qwen3 = model_profile(QWEN3_VL_30B)
    assert qwen3["vision"]["deepstack_layers"] == 3 and qwen3["vision"]["video_max_pixels"] == 25165824
    assert qwen3["num_hidden_layers"] == 48 and qwen3["moe"]["num_experts"] == 128      # the language model's
    # Qwen2-VL: embed_dim is the tower's width, hidden_size the language model's, the MLP mlp_ratio wide
    qwen2 = model_profile(dict(QWEN25_VL_7B, model_type="qwen2_vl", vision_config={
        "depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 3584, "patch_size": 14}))
    assert (qwen2["vision"]["hidden_size"], qwen2["vision"]["intermediate_size"], qwen2["vision"]["gated_mlp"]) == (
        1280, 5120, False)
    llava = model_profile(LLAVA)
    assert llava["vision"] == {"family": None} and any("clip_vision_model" in w for w in llava["warnings"])
    assert model_profile(dict(QWEN25_VL_7B, vision_config=None))["vision"] is None


def test_preprocessor_caps_replace_the_stock_ones():
    vision = model_profile(QWEN3_VL_30B)["vision"]
    read = with_preprocessor_pixels(vision, {"size": {"longest_edge": 1003520, "shortest_edge": 65536}})
    assert (read["image_max_pixels"], read["video_max_pixels"], read["pixels_source"]) == (1003520, 1003520,
                                                                                           "preprocessor")
    read = with_preprocessor_pixels(vision, {"max_pixels": 2048 * 1024}, {"size": {"longest_edge": 4096 * 1024}})
    assert (read["image_max_pixels"], read["video_max_pixels"]) == (2048 * 1024, 4096 * 1024)
    # the image processor lets max_pixels overwrite size; the video one reads size alone, from the image file too
    read = with_preprocessor_pixels(vision, {"max_pixels": 2048 * 1024, "size": {"longest_edge": 1024 * 1024}})
    assert (read["image_max_pixels"], read["video_max_pixels"]) == (2048 * 1024, 1024 * 1024)
    assert with_preprocessor_pixels(vision, {"do_resize": True}) is vision


@pytest.mark.parametrize("config, settings, batch", [
    # Qwen2.5-VL: a video of the image's size, as many frame pairs as max_model_len holds (at most 7), wins the tie
    (QWEN25_VL_7B, {}, ("video", 114688, 1)),
    (QWEN25_VL_7B, {"max_model_len": 32768}, ("video", 32768, 1)),
    (QWEN25_VL_7B, {"max_model_len": 8192}, ("video", 16384, 1)),
    (QWEN25_VL_7B, {"mm_limits": {"video": 0}}, ("image", 16384, 1)),
    # Qwen3-VL: the image (16,384 tokens) beats the two-frame video (12,288); the budget holds two at 32,768 tokens
    (QWEN3_VL_30B, {}, ("image", 16384, 1)),
    (QWEN3_VL_30B, {"max_num_batched_tokens": 32768}, ("image", 16384, 2)),
    (QWEN3_VL_30B, {"max_num_batched_tokens": 32768, "max_num_seqs": 1, "max_model_len": 16384}, ("image", 16384, 1)),
    (QWEN3_VL_30B, {"mm_limits": {"image": 0}}, ("video", 12288, 1)),
    (QWEN3_VL_30B, {"mm_limits": {"image": 0, "video": 0}}, None),
    (QWEN3_VL_30B, {"language_model_only": True}, None),
    (QWEN3_VL_30B, {"skip_mm_profiling": True}, None),
    (LLAVA, {}, None),
])
def test_the_dummy_batch_vllm_profiles(config, settings, batch):
    assert engine_memory.encoder_dummy_batch(model_profile(config)["vision"], engine(**settings)) == batch


def test_qwen25_vl_video_forward_and_what_it_adds_to_the_peak():
    """458,752 patches x (pixels 1176 + rotary 80 + the gated MLP's 5 x 1280 + 3 x 3420) x 2 bytes; beyond a
    language-model peak of 1 GiB."""
    profile = model_profile(QWEN25_VL_7B)
    forward = 458752 * (1176 + 80 + 5 * 1280 + 3 * 3420) * 2
    assert engine_memory.encoder_profile_bytes(profile, 1, engine(), GIB) == forward - GIB
    eager = 458752 * (1176 + 80 + 3 * 1280 + 3 * 3420) * 2
    assert engine_memory.encoder_profile_bytes(profile, 1, engine(enforce_eager=True), GIB) == eager - GIB
    # a language model's peak above the tower's: its outputs and pixel input held under that batch remain
    held = 114688 * 3584 * 2 + 458752 * 1176 * 2
    assert engine_memory.encoder_profile_bytes(profile, 1, engine(), 40 * GIB) == held


def test_tensor_parallelism_splits_the_tower_s_projections():
    profile = model_profile(QWEN3_VL_30B)
    one, four = (engine_memory.encoder_forward_elements(profile["vision"], tp, False) for tp in (1, 4))
    assert one == 1536 + 72 + 1152 + 3 * 2048 / 4 + 11 * 1152
    assert four == 1536 + 72 + 1152 + 3 * 2048 / 4 + (3 + 8 / 4) * 1152
    # Qwen2.5-VL: at TP 4 its gated MLP (5 x 1280 + 3 x 3420 / 4) outgrows the split attention (3 + 8 / 4) x 1280
    qwen25 = model_profile(QWEN25_VL_7B)["vision"]
    assert engine_memory.encoder_forward_elements(qwen25, 4, False) == 1176 + 80 + 5 * 1280 + 3 * 3420 / 4
    # Qwen2-VL all-gathers qkv to full width on every rank: 3 x hidden more than the split share
    qwen2 = model_profile(dict(QWEN25_VL_7B, model_type="qwen2_vl", vision_config={
        "depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 3584, "patch_size": 14}))
    assert engine_memory.encoder_forward_elements(qwen2["vision"], 4, False) == 1176 + 80 + (6 + 5 / 4) * 1280
    assert engine_memory.encoder_forward_elements(qwen2["vision"], 1, False) == 1176 + 80 + 11 * 1280


def test_the_calibration_key_carries_the_encoder_s_dummy_batch():
    """Qwen2.5-VL's dummy video follows max_model_len, so an overhead measured at 32K never calibrates 128K."""
    profile = model_profile(QWEN25_VL_7B)
    keys = [engine_memory.overhead_config_key(engine(max_model_len=length), profile) for length in (32768, 128000)]
    assert keys == ["encoder=video:32768x1", "encoder=video:114688x1"]
    assert engine_memory.overhead_config_key(engine(mm_limits={"image": 0, "video": 0}), profile) == \
        "mm_limits=image:0/video:0"
    assert engine_memory.overhead_config_key(engine(), model_profile(LLAVA)) == ""


def test_without_max_model_len_the_model_s_own_length_is_taken():
    profile = model_profile(QWEN25_VL_7B)
    settings = engine()
    del settings["max_model_len"]
    assert engine_memory.encoder_profile_bytes(profile, 1, settings, GIB) == \
        engine_memory.encoder_profile_bytes(profile, 1, engine(max_model_len=128000), GIB)


@pytest.mark.parametrize("version, held", [("0.23.0", "outputs+pixels"), ("0.25.0", None), ("0.26.0", None),
                                           ("0.27.0", "outputs"), ("0.29.0", "outputs")])
def test_the_runner_decides_whether_and_how_the_encoder_is_profiled(version, held):
    """A dense VLM runs on the V2 runner from 0.25 (every non-MoE model), which profiles no encoder before 0.27 and
    then holds only the tower's outputs under the language model's batch; the V1 runner holds the pixel input too.
    A language-model peak above the tower's leaves what is held."""
    profile = model_profile(QWEN25_VL_7B)
    added = engine_memory.encoder_profile_bytes(profile, 1, engine(version=version), 40 * GIB)
    outputs, pixels = 114688 * 3584 * 2, 458752 * 1176 * 2
    assert added == {None: 0, "outputs": outputs, "outputs+pixels": outputs + pixels}[held]


def test_an_engine_that_leaves_the_tower_out_of_its_profile_run_is_said():
    profile = model_profile(QWEN25_VL_7B)
    said = [version for version in ("0.23.0", "0.25.0", "0.26.0", "0.27.0", "0.29.0")
            if engine_memory.encoder_unprofiled(profile, engine(version=version))]
    assert said == ["0.25.0", "0.26.0"]
    assert engine_memory.encoder_unprofiled(profile, engine(version="0.25.0", language_model_only=True)) is None
    assert engine_memory.encoder_unprofiled(model_profile(QWEN3_VL_30B), engine(version="0.25.0")) is None    # MoE: V1


def test_a_public_qwen25_vl_start_that_failed_for_the_video_profile():
    """A public vLLM 0.23.0 log (docker vllm/vllm-openai:v0.23.0, Qwen2.5-VL-7B-Instruct on one A100-SXM4-80GB at
    --gpu-memory-utilization 0.22, default max_model_len 128000; a README in the stored code corpus whose
    repository the index does not name): "Model loading took 15.67 GiB", "Encoder cache will be initialized with a
    budget of 114688 tokens, and profiled with 1 video items", "Estimated CUDA graph memory: 0.53 GiB total",
    "Available KV cache memory: -14.28 GiB", then "No available memory for the cache blocks". Without the
    tower the budget said 0.3 GiB and a start."""
    tier = {"name": "bf16", "bits": 16, "present": True, "dtype": "bfloat16", "weights_dir": "/w",
            "weight_bytes_per_rank": int(15.67 * GIB), "weights_as_loaded": True}
    total = int(79.15 * GIB)
    result = plan(model_profile(QWEN25_VL_7B), [tier], [{"index": 0, "total": total, "free": total}],
                  gpu_memory_utilization=0.22, max_model_len=128000, min_max_model_len=128000, max_num_seqs=256,
                  min_max_num_seqs=256, engine={"version": "0.23.0", "gpu_name": "NVIDIA A100-SXM4-80GB"})
    table = result["budget_bytes"]
    assert abs(table["kv_available"] / GIB - -14.28) < 0.3 and not result["starts"]
    assert table["encoder_profile"] > 14 * GIB


def test_further_config_limits_and_language_model_only_are_read():
    settings, problems, warnings = engine_memory.config_settings({
        "limit-mm-per-prompt": '{"video": 0, "image": {"count": 2, "width": 512}}', "language_model_only": True,
        "mm-processor-kwargs": {"max_pixels": 1000}})
    assert settings == {"mm_limits": {"video": 0, "image": 2}, "language_model_only": True} and problems == []
    assert [w.split(" ")[0] for w in warnings] == ["limit-mm-per-prompt:", "mm-processor-kwargs"]   # width: said
    assert engine_memory.config_settings({"limit_mm_per_prompt": {"image": -1}})[1] == [
        "limit_mm_per_prompt: {'image': -1} is not a value vLLM takes there"]
    assert engine_memory.overhead_config_key({"mm_limits": {"video": 0, "image": 2}}) == "mm_limits=image:2/video:0"
    # a modality given options without a count keeps vLLM's 999; the options themselves are said
    settings, problems, warnings = engine_memory.config_settings({"limit-mm-per-prompt": {"image": {"width": 512}}})
    assert settings == {"mm_limits": {"image": 999}} and problems == []
    assert warnings[0].startswith("limit-mm-per-prompt: the dummy item's size options are not modelled")


def test_a_checkpoint_s_preprocessor_is_read_and_a_broken_one_named(tmp_path):
    sample_checkpoints.write(tmp_path / "bf16")
    config_path = tmp_path / "bf16" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(model_type="qwen2_5_vl", vision_config=QWEN25_VL_7B["vision_config"])
    config_path.write_text(json.dumps(config))
    (tmp_path / "bf16" / "preprocessor_config.json").write_text(json.dumps({"max_pixels": 1003520}))
    info = inspect_weights(str(tmp_path / "bf16"))
    assert info["status"] == "ok" and info["profile"]["vision"]["image_max_pixels"] == 1003520
    (tmp_path / "bf16" / "preprocessor_config.json").write_text("{not json")
    info = inspect_weights(str(tmp_path / "bf16"))
    assert (info["status"], info["problem"], info["present"]) == ("weight_loading", "bad_config", False)
    assert "preprocessor_config.json" in info["reason"] and "cannot be read as JSON" in info["reason"]
