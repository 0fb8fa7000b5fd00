# -*- coding: utf-8 -*-
"""A multimodal model's vision tower in the profile run: its shape read from config.json, the dummy batch vLLM
profiles, and what it adds to the torch peak (engine_memory.encoder_profile_bytes)."""
import json

import pytest

import sample_checkpoints

from ansible_collections.hy3.fleet.plugins.module_utils import budget, engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.budget import GIB, plan
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import (
    ModelConfigError, model_profile, with_preprocessor_pixels)
from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights

# Qwen/Qwen2.5-VL-7B-Instruct's config.json (the published values).
QWEN25_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "max_position_embeddings": 128000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
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
    "vision_config": {"depth": 27, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 4304,
                      "num_heads": 16, "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "deepstack_visual_indexes": [8, 16, 24]},
}
LLAVA = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "hidden_size": 4096,
         "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32064,
         "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024}}


KIMI_K25 = dict(QWEN25_VL_7B, architectures=["KimiK25ForConditionalGeneration"])


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


@pytest.mark.parametrize("field, value", [("patch_size", "14"), ("out_hidden_size", [3584]), ("depth", 0)])
def test_a_modelled_towers_size_that_is_not_a_count_is_a_config_error(field, value):
    tower = dict(QWEN25_VL_7B["vision_config"], **{field: value})
    with pytest.raises(ModelConfigError) as caught:
        model_profile(dict(QWEN25_VL_7B, vision_config=tower), source="/m/config.json")
    assert caught.value.field == "vision_config." + field and "positive integer" in str(caught.value)


# The published parameter counts (the checkpoints' safetensors totals as their model pages give them).
PUBLISHED_TOTAL_PARAMS = {"Qwen2.5-VL-7B": 8.29e9, "Qwen3-VL-30B-A3B": 31.07e9}


@pytest.mark.parametrize("name, config", [("Qwen2.5-VL-7B", QWEN25_VL_7B), ("Qwen3-VL-30B-A3B", QWEN3_VL_30B)])
def test_a_config_only_estimate_counts_the_vision_tower(name, config):
    """vLLM loads the tower beside the language model, so a budget without shard headers must count it: a floor
    (no position tables or biases, one projector matrix), within 1% of the published total."""
    params = model_profile(config)["params"]
    text_only = model_profile(dict(config, vision_config=None))["params"]
    assert params["vision"] > 0.4e9 and params["total"] == text_only["total"] + params["vision"]
    assert params["active"] == text_only["active"]        # a token's forward through the language model
    assert 0.99 * PUBLISHED_TOTAL_PARAMS[name] < params["total"] <= PUBLISHED_TOTAL_PARAMS[name]


def test_the_tower_s_weights_stay_16_bit_and_sit_on_every_stage():
    """vLLM's Qwen-VL classes build the tower whatever the pipeline rank (qwen2_5_vl.py has no first-rank test),
    so every stage holds it; Gemma 4's transformers-built tower is whole on every tensor-parallel rank."""
    profile = model_profile(QWEN25_VL_7B)
    vision = profile["params"]["vision"]
    text_only = model_profile(dict(QWEN25_VL_7B, vision_config=None))
    # an int4 tier quantizes the language model's layers only (quantizers leave the tower out)
    int4 = dict(profile, quantization={"bits": 4})
    added = (budget.nominal_weight_bytes_per_rank(int4, 4, 1, False)
             - budget.nominal_weight_bytes_per_rank(dict(text_only, quantization={"bits": 4}), 4, 1, False))
    assert added == pytest.approx(2 * vision, abs=1)
    first, last = budget.stage_shares(profile, 2, load_mtp=False)
    first_text, last_text = budget.stage_shares(text_only, 2, load_mtp=False)
    assert first["params_16bit"] - first_text["params_16bit"] == vision == \
        last["params_16bit"] - last_text["params_16bit"]
    assert first["params"] == pytest.approx(first_text["params"])
    split = budget.nominal_weight_bytes_per_rank(profile, 16, 4, False)
    replicated = budget.nominal_weight_bytes_per_rank(dict(profile, vision_replicated=True), 16, 4, False)
    assert replicated - split == pytest.approx(2 * vision * 3 / 4, abs=2)


def test_remote_code_vlms_nest_their_language_model_under_their_own_names():
    """InternVL (and Ovis) call it llm_config, DeepSeek-VL2 language_config; read at the top level instead, the
    config has no num_hidden_layers and the budget could not run."""
    language = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
                "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                "vocab_size": 151674, "max_position_embeddings": 32768, "tie_word_embeddings": False}
    tower = {"model_type": "intern_vit_6b", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
             "patch_size": 14, "image_size": 448, "hidden_act": "gelu"}
    for field in ("llm_config", "language_config"):
        profile = model_profile({"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
                                 field: language, "vision_config": tower})
        assert (profile["num_hidden_layers"], profile["hidden_size"], profile["num_key_value_heads"]) == (28, 3584, 4)
        assert 0.3e9 < profile["params"]["vision"] < 0.31e9         # InternViT-300M


def test_a_tower_without_a_named_width_and_depth_adds_nothing():
    assert model_profile(LLAVA)["params"]["vision"] == 0     # its config names no depth
    assert model_profile(dict(LLAVA, vision_config={"model_type": "clip_vision_model", "hidden_size": 1024,
                                                    "num_hidden_layers": 24, "intermediate_size": 4096,
                                                    "patch_size": 14}))["params"]["vision"] > 0.3e9


# Gemma 4 E2B's audio_config (google/gemma-4-E2B-it; a 12-layer USM conformer 1024 wide) and Qwen2-Audio-7B's
# Whisper-style encoder.
GEMMA4_AUDIO = {"model_type": "gemma4_audio", "hidden_size": 1024, "num_hidden_layers": 12, "num_attention_heads": 8,
                "conv_kernel_size": 5, "output_proj_dims": 1536}
WHISPER_AUDIO = {"model_type": "qwen2_audio_encoder", "d_model": 1280, "encoder_layers": 32, "encoder_ffn_dim": 5120}


def test_a_config_only_estimate_counts_the_audio_tower_too():
    """vLLM builds an audio tower wherever config.json has an audio_config (gemma4_mm.py, qwen2_audio.py): a conformer
    layer holds 24 squares of its width, a Whisper-style one its four attention projections and two feed-forward
    matrices, then the output projection and the projector into the language model. Public Gemma 4 E2B / E4B starts
    load 0.72 - 0.78 GiB more than the budget counted without it (0.57 GiB of it this tower)."""
    text = dict(QWEN25_VL_7B, vision_config=None)
    gemma = model_profile(dict(text, audio_config=GEMMA4_AUDIO))
    assert gemma["audio_tower"] and gemma["params"]["vision"] == 12 * 24 * 1024 ** 2 + 1024 * 1536 + 1536 * 3584
    assert gemma["params"]["total"] - model_profile(text)["params"]["total"] == gemma["params"]["vision"]
    whisper = model_profile(dict(text, audio_config=WHISPER_AUDIO))["params"]["vision"]
    assert whisper == 32 * (4 * 1280 ** 2 + 2 * 1280 * 5120) + 1280 * 3584
    both = model_profile(dict(QWEN25_VL_7B, audio_config=GEMMA4_AUDIO))["params"]["vision"]
    assert both == model_profile(QWEN25_VL_7B)["params"]["vision"] + gemma["params"]["vision"]
    # an audio tower whose layers cannot be sized adds nothing (and is not said to be there)
    unsized = model_profile(dict(text, audio_config={"model_type": "other_audio", "hidden_size": 1024,
                                                     "num_hidden_layers": 12}))
    assert unsized["params"]["vision"] == 0 and not unsized["audio_tower"]


@pytest.mark.parametrize("limits, skipped", [
    ({"image": 0, "video": 0}, None),                  # audio still allowed: the towers are built
    ({"image": 0, "video": 0, "audio": 0}, "--limit-mm-per-prompt 0 for image and video and audio"),
])
def test_an_audio_tower_is_left_out_only_with_audio_limited_to_0(limits, skipped):
    profile = model_profile(dict(QWEN25_VL_7B, audio_config=GEMMA4_AUDIO))
    assert engine_memory.vision_tower_skipped(profile, engine(version="0.29.0", mm_limits=limits)) == skipped


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
    # 0.11 - 0.12 counted a video's timestamp text too: 12.5 tokens a soft token, as many as max_model_len holds
    (QWEN3_VL_30B, {"version": "0.12.0"}, ("video", 153600, 1)),
    (QWEN3_VL_30B, {"version": "0.11.0", "max_model_len": 8192}, ("video", 102400, 1)),
    (QWEN3_VL_30B, {"version": "0.13.0"}, ("image", 16384, 1)),
    (QWEN3_VL_30B, {"language_model_only": True}, None),
    (QWEN3_VL_30B, {"skip_mm_profiling": True}, None),
    (LLAVA, {}, None),
])
def test_the_dummy_batch_vllm_profiles(config, settings, batch):
    assert engine_memory.encoder_dummy_batch(model_profile(config)["vision"], engine(**settings)) == batch


def test_a_public_qwen3_vl_start_whose_profile_held_widened_encoder_outputs():
    """vLLM 0.12.0, Qwen3-VL-30B-A3B on 2 x H100, 65,536 tokens, 8,192 batched, 256 sequences: "Encoder cache will be
    initialized with a budget of 153600 tokens, and profiled with 1 video items", and 37.23 GiB of KV cache. The
    12,288-token video's outputs (with the three deepstack levels) were widened to the budget's 153,600 rows and kept
    through the language model's batch: 2.34 GiB where their own rows take 0.19."""
    profile = model_profile(QWEN3_VL_30B)
    settings = engine(version="0.12.0", max_num_batched_tokens=8192, max_model_len=65536)
    vision = profile["vision"]
    assert engine_memory.encoder_embed_tokens(vision, "video", 153600, settings) == 12288
    assert engine_memory.encoder_embed_tokens(vision, "video", 12288, dict(settings, version="0.13.0")) == 12288
    widened = engine_memory.encoder_profile_bytes(profile, 2, settings, 0)
    rows = 153600 * vision["out_hidden_size"] * (1 + vision["deepstack_layers"]) * 2
    pixels = 12288 * 4 * engine_memory._pixel_elements(vision) * 2
    assert widened == rows + pixels
    # an image run that fills its budget is not widened; a budget beyond the image is (what the outputs hold counts
    # under a language-model peak above the tower's forward)
    lm_peak = 8 * 1024 ** 3

    def held(**extra):
        return engine_memory.encoder_profile_bytes(profile, 2, dict(settings, mm_limits={"video": 0}, **extra), lm_peak)

    assert held(max_num_batched_tokens=16384) == held(max_num_batched_tokens=16384, version="0.13.0")
    assert held(max_num_batched_tokens=20000) - held(max_num_batched_tokens=20000, version="0.13.0") == (
        (20000 - 16384) * vision["out_hidden_size"] * (1 + vision["deepstack_layers"]) * 2)


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
    assert settings == {"mm_limits": {"video": 0, "image": 2}, "language_model_only": True,
                        "unmodelled_config": {"mm-processor-kwargs": '{"max_pixels": 1000}'}} and problems == []
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


# --- a tower the engine does not build: no image or video input ---

@pytest.mark.parametrize("config, settings, skipped", [
    (QWEN25_VL_7B, engine(language_model_only=True), "--language-model-only"),
    (QWEN25_VL_7B, engine(mm_limits={"image": 0, "video": 0}), "--limit-mm-per-prompt 0 for image and video"),
    (QWEN25_VL_7B, engine(mm_limits={"image": 0}), None),                   # videos still 999: the tower is built
    (QWEN25_VL_7B, engine(), None),
    (QWEN25_VL_7B, engine(version="0.16.0", language_model_only=True), None),   # the flag arrived in 0.17
    (QWEN25_VL_7B, engine(version="0.10.2", mm_limits={"image": 0, "video": 0}), "--limit-mm-per-prompt 0 for image and video"),
    (QWEN3_VL_30B, engine(version="0.10.2", mm_limits={"image": 0, "video": 0}), None),    # its class checks from 0.11
    (QWEN3_VL_30B, engine(version="0.11.0", mm_limits={"image": 0, "video": 0}), "--limit-mm-per-prompt 0 for image and video"),
    (dict(QWEN25_VL_7B, architectures=["Gemma3ForConditionalGeneration"]),
     engine(version="0.14.0", mm_limits={"image": 0, "video": 0}), None),  # every model only from 0.15
    (dict(QWEN25_VL_7B, architectures=["Gemma3ForConditionalGeneration"]),
     engine(version="0.15.0", mm_limits={"image": 0, "video": 0}), "--limit-mm-per-prompt 0 for image and video"),
    (dict(QWEN25_VL_7B, vision_config=None), engine(language_model_only=True), None),     # no tower to leave out
    (dict(QWEN25_VL_7B, architectures=["KeyeForConditionalGeneration"]),
     engine(version="0.14.0", mm_limits={"image": 0, "video": 0}), None),  # reads the limits, builds its tower anyway
    # Kimi-K2.5's tower reads "vision_chunk" items, and is marked only from 0.16
    (KIMI_K25, engine(version="0.29.0", mm_limits={"image": 0, "video": 0}), None),
    (KIMI_K25, engine(version="0.29.0", mm_limits={"vision_chunk": 0}), "--limit-mm-per-prompt 0 for vision_chunk"),
    (KIMI_K25, engine(version="0.15.0", mm_limits={"vision_chunk": 0}), None),
    (KIMI_K25, engine(version="0.17.0", language_model_only=True), "--language-model-only"),
])
def test_when_the_engine_builds_no_tower(config, settings, skipped):
    assert engine_memory.vision_tower_skipped(model_profile(config), settings) == skipped


def test_a_tower_not_built_is_not_budgeted():
    """Its parameters leave the floor; its tensors (read from the headers) leave the measured bytes."""
    gpu = [{"index": 0, "total": 80 * GIB, "free": 80 * GIB}]
    profile = model_profile(QWEN25_VL_7B)
    tower = profile["params"]["vision"]

    def budgeted(tier, **settings):
        result = plan(profile, [dict(tier)], gpu, max_model_len=32768, min_max_model_len=32768, max_num_seqs=8,
                      min_max_num_seqs=8, engine=engine(max_model_len=32768, **settings))
        return result["budget_bytes"]["weights"], result

    floor = {"name": "bf16", "bits": 16, "present": True, "dtype": "bfloat16", "weights_dir": "/w"}
    with_tower, built = budgeted(floor)
    without, skipped = budgeted(floor, language_model_only=True)
    assert with_tower - without == tower * 2 and built["vision_tower_skipped"] is None
    assert skipped["vision_tower_skipped"] == "--language-model-only"
    assert skipped["total_params_b"] == round((profile["params"]["total"] - tower) / 1e9, 2)
    measured = dict(floor, weight_bytes_per_rank=16 * GIB, tower_bytes_per_rank=GIB)
    rope = engine_memory.rope_table_bytes(profile, 2)        # built while loading, in no checkpoint file
    assert budgeted(measured, language_model_only=True)[0] == 15 * GIB + rope
    assert budgeted(measured)[0] == 16 * GIB + rope


def test_the_headers_say_which_bytes_are_the_tower_s():
    from ansible_collections.hy3.fleet.plugins.module_utils.checkpoint import summarize
    tensors = {
        "model.language_model.layers.0.mlp.down_proj.weight": ("a", "BF16", [64, 256], 64 * 256 * 2),
        "model.visual.blocks.0.attn.qkv.weight": ("a", "BF16", [96, 32], 96 * 32 * 2),
        "visual.merger.mlp.0.weight": ("a", "BF16", [32, 32], 32 * 32 * 2),
        "multi_modal_projector.linear_1.weight": ("a", "BF16", [32, 32], 32 * 32 * 2),
        "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight": ("a", "BF16", [32, 32], 32 * 32 * 2),
        "model.vision_tower_norm.weight": ("a", "BF16", [32], 64),        # a name that only starts like one
    }
    facts = summarize(tensors, 1)
    assert facts["tower_bytes_per_rank"] == (96 * 32 + 3 * 32 * 32) * 2
    assert facts["weight_bytes_per_rank"] == sum(t[3] for t in tensors.values())


QWEN35_MOE = dict(QWEN3_VL_30B, architectures=["Qwen3_5MoeForConditionalGeneration"])


@pytest.mark.parametrize("config, settings, whole", [
    (QWEN3_VL_30B, engine(mm_encoder_tp_mode="data"), True),
    (QWEN3_VL_30B, engine(), False),                                          # "weights", the engine's default
    (QWEN3_VL_30B, engine(version="0.10.2", mm_encoder_tp_mode="data"), False),    # Qwen3-VL's tower runs it from 0.11
    (QWEN25_VL_7B, engine(version="0.10.2", mm_encoder_tp_mode="data"), True),
    (QWEN35_MOE, engine(version="0.17.1", mm_encoder_tp_mode="data"), True),
    (QWEN35_MOE, engine(version="0.15.1", mm_encoder_tp_mode="data"), False),
    (QWEN35_MOE, engine(version="0.16.0", mm_encoder_tp_mode="data"), True),      # between the wheels read: whole
    (dict(QWEN25_VL_7B, architectures=["HunYuanVLForConditionalGeneration"]),
     engine(version="0.29.0", mm_encoder_tp_mode="data"), False),              # taken back in 0.29
    (LLAVA, engine(mm_encoder_tp_mode="data"), False),                        # falls back to "weights"
    (dict(QWEN25_VL_7B, vision_config=None), engine(mm_encoder_tp_mode="data"), False),   # no tower
])
def test_which_towers_run_data_parallel(config, settings, whole):
    assert engine_memory.vision_tower_data_parallel(model_profile(config), settings) is whole


def test_a_data_parallel_tower_is_whole_on_every_rank():
    """--mm-encoder-tp-mode data: the floor counts the tower whole on each of the 4 ranks, and the headers' whole
    tower (tower_bytes) replaces the rank's share of it in the measured bytes."""
    gpus = [{"index": i, "total": 80 * GIB, "free": 80 * GIB} for i in range(4)]
    profile = model_profile(QWEN3_VL_30B)
    tower = profile["params"]["vision"] * 2

    def weights(tier, **settings):
        result = plan(profile, [dict(tier)], gpus, max_model_len=32768, min_max_model_len=32768, max_num_seqs=8,
                      min_max_num_seqs=8, tensor_parallel_size=4, engine=engine(max_model_len=32768, **settings))
        return result["budget_bytes"]["weights"]

    floor = {"name": "bf16", "bits": 16, "present": True, "dtype": "bfloat16", "weights_dir": "/w"}
    assert weights(floor, mm_encoder_tp_mode="data") - weights(floor) == pytest.approx(tower - tower / 4, abs=4)
    measured = dict(floor, weight_bytes_per_rank=16 * GIB, tower_bytes_per_rank=GIB // 4, tower_bytes=GIB)
    rope = engine_memory.rope_table_bytes(profile, 2)
    assert weights(measured, mm_encoder_tp_mode="data") == 16 * GIB + GIB - GIB // 4 + rope
    assert weights(measured) == 16 * GIB + rope
    # a tier read before the whole tower was recorded keeps what was measured
    assert weights(dict(measured, tower_bytes=None), mm_encoder_tp_mode="data") == 16 * GIB + rope


def test_a_data_parallel_tower_runs_its_share_of_the_items_unsharded():
    """Each rank encodes whole items at the tower's full width from a copy of their pixels beside the batch's: the
    dummy batch's one video lands on one rank, which runs it as a single GPU would, with the batch's pixels held."""
    profile = model_profile(QWEN25_VL_7B)
    patches = 458752
    forward = patches * (1176 + 80 + 5 * 1280 + 3 * 3420) * 2 + patches * 1176 * 2
    assert engine_memory.encoder_profile_bytes(profile, 4, engine(mm_encoder_tp_mode="data"), GIB) == forward - GIB
    split = patches * (1176 + 80 + 5 * 1280 + 3 * 3420 / 4) * 2
    assert engine_memory.encoder_profile_bytes(profile, 4, engine(), GIB) == int(split - GIB)


@pytest.mark.parametrize("items, tp, rank_items", [(1, 8, 1), (5, 4, 2), (2, 2, 1)])
def test_a_data_parallel_tower_keeps_the_gathered_outputs(items, tp, rank_items):
    """The outputs, padded to the busiest rank's items and all-gathered, are views into one tp x rank-items buffer
    that the profile run keeps through the language model's batch: Qwen3-VL's 16384-token image with its three
    deepstack outputs beside the merged one (4 x 2048 wide)."""
    profile = model_profile(QWEN3_VL_30B)
    settings = engine(mm_limits={"video": 0}, max_num_batched_tokens=16384 * items, mm_encoder_tp_mode="data")
    assert engine_memory.encoder_dummy_batch(profile["vision"], settings) == ("image", 16384, items)
    width, pixels = 4 * 2048 * 2, items * 16384 * 4 * 1536 * 2
    gathered = tp * rank_items * 16384 * width
    assert engine_memory.encoder_profile_bytes(profile, tp, settings, 100 * GIB) == gathered + pixels
    weights_mode = dict(settings, mm_encoder_tp_mode=None)
    assert engine_memory.encoder_profile_bytes(profile, tp, weights_mode, 100 * GIB) == items * 16384 * width + pixels


def test_the_key_names_the_data_mode_only_where_the_engine_runs_it():
    settings = engine(mm_encoder_tp_mode="data", max_model_len=None)
    assert "mm_encoder_tp_mode=data" in engine_memory.overhead_config_key(settings, model_profile(QWEN3_VL_30B))
    assert engine_memory.overhead_config_key(settings, model_profile(LLAVA)) == ""      # vLLM falls back to weights


@pytest.mark.parametrize("architecture, version, whole", [
    ("Tarsier2ForConditionalGeneration", "0.24.0", True), ("Tarsier2ForConditionalGeneration", "0.25.0", False),
    ("ColQwen3_5", "0.19.0", True),                                  # inherits the flag from Qwen3.5's class
    ("KimiK3ForConditionalGeneration", "0.27.0", True),               # a vllm/models package
    ("KimiK3ForConditionalGeneration", "0.26.0", False),
])
def test_inherited_and_packaged_towers_run_data_parallel(architecture, version, whole):
    profile = model_profile(dict(QWEN25_VL_7B, architectures=[architecture]))
    assert engine_memory.vision_tower_data_parallel(profile, engine(version=version, mm_encoder_tp_mode="data")) is whole


def test_the_old_spelling_of_the_data_mode_is_warned_about():
    settings, problems, warnings = engine_memory.config_settings({"enable-multimodal-encoder-data-parallel": True},
                                                                 "0.11.0")
    assert problems == [] and len(warnings) == 1 and "enable-multimodal-encoder-data-parallel" in warnings[0]
    assert settings["unmodelled_config"] == {"enable-multimodal-encoder-data-parallel": "True"}


def test_the_headers_give_the_whole_tower_beside_a_rank_s_share():
    from ansible_collections.hy3.fleet.plugins.module_utils.checkpoint import summarize
    tensors = {
        "model.language_model.layers.0.mlp.down_proj.weight": ("a", "BF16", [64, 256], 64 * 256 * 2),
        "model.visual.blocks.0.mlp.fc1.weight": ("a", "BF16", [128, 32], 128 * 32 * 2),
    }
    facts = summarize(tensors, 1, tp=4)
    assert facts["tower_bytes"] == 128 * 32 * 2
    assert facts["tower_bytes_per_rank"] == 128 * 32 * 2 // 4


@pytest.mark.parametrize("value, expected", [("data", {"mm_encoder_tp_mode": "data"}), ("weights", {})])
def test_the_encoder_s_tp_mode_is_read_from_the_further_config(value, expected):
    settings, problems, warnings = engine_memory.config_settings({"mm-encoder-tp-mode": value}, "0.20.0")
    assert (settings, problems, warnings) == (expected, [], [])
    assert engine_memory.config_settings({"mm_encoder_tp_mode": "rows"}, "0.20.0")[1] == [
        "mm_encoder_tp_mode: 'rows' is not a value vLLM takes there"]
    assert engine_memory.config_settings({"mm-encoder-tp-mode": "data"}, "0.10.1")[1] == [
        "mm-encoder-tp-mode is an option of vLLM 0.10.2 and later, not of 0.10.1"]
    assert engine_memory.overhead_config_key(engine(mm_encoder_tp_mode="data")) == "mm_encoder_tp_mode=data"


# mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json (the published values: wlejon/brolm's verbatim copy)
MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "spatial_merge_size": 2,
    "multimodal_projector_bias": False, "projector_hidden_act": "gelu", "vision_feature_layer": -1,
    "text_config": {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
                    "max_position_embeddings": 131072, "rope_theta": 1000000000.0},
    "vision_config": {"model_type": "pixtral", "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 4096,
                      "num_hidden_layers": 24, "num_attention_heads": 16, "head_dim": 64, "patch_size": 14,
                      "image_size": 1540, "num_channels": 3},
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("settings, mistral", [
    ({"config_format": "mistral", "version": "0.11.0"}, True),                 # as set
    ({"config_format": "hf", "version": "0.19.0", "mistral_format_files": True}, False),
    ({"version": "0.19.0", "mistral_format_files": True}, True),               # auto, the files there
    ({"version": "0.12.0", "mistral_format_files": True}, True),
    ({"version": "0.11.2", "mistral_format_files": True}, False),              # auto took config.json first
    ({"version": "0.19.0"}, False),                                            # auto, config.json alone
    ({"version": "0.20.0", "mistral_format_files": True}, True),               # read so, its tower split from 0.20
])
def test_which_engines_read_mistral_s_own_format(settings, mistral):
    assert engine_memory.reads_mistral_format(settings) is mistral
    whole = mistral and engine_memory.engine_version(settings["version"]) < (0, 20, 0)
    assert engine_memory.vision_tower_whole(model_profile(MISTRAL_SMALL_31), settings) is whole
    assert engine_memory.vision_tower_whole(model_profile(dict(MISTRAL_SMALL_31, vision_config=None)), settings) is False


def test_mistral_s_format_keeps_the_pixtral_tower_whole_on_every_rank():
    """Read in Mistral's own format (PixtralForConditionalGeneration: plain nn.Linear), every rank of TP 4 holds the
    whole tower; config.json's class splits it four ways."""
    gpus = [{"index": i, "total": 80 * GIB, "free": 80 * GIB} for i in range(4)]
    profile = model_profile(MISTRAL_SMALL_31)
    tower = profile["params"]["vision"] * 2
    assert 0.75 * GIB < tower < 0.85 * GIB        # the engine's loads show 0.82 GiB a rank at TP 1, 2 and 4

    def budgeted(**settings):
        result = plan(profile, [{"name": "bf16", "bits": 16, "present": True, "dtype": "bfloat16", "weights_dir": "/w"}],
                      gpus, max_model_len=32768, min_max_model_len=32768, max_num_seqs=8, min_max_num_seqs=8,
                      tensor_parallel_size=4, engine=engine(**dict(dict(max_model_len=32768, version="0.19.0"), **settings)))
        return result["budget_bytes"]

    split, whole = budgeted(), budgeted(config_format="mistral")
    assert budgeted(config_format="mistral", version="0.20.0")["weights"] == split["weights"]     # split from 0.20
    assert whole["weights"] - split["weights"] == pytest.approx(tower - tower / 4, abs=4)
    assert budgeted(mistral_format_files=True, version="0.19.0")["weights"] == whole["weights"]


def test_a_config_format_is_read_from_the_engine_s_config():
    assert engine_memory.config_settings({"config_format": "mistral"})[0] == {"config_format": "mistral"}
    assert engine_memory.config_settings({"config-format": "auto"})[0] == {}          # the engine's own choice
    assert "not a value vLLM takes" in engine_memory.config_settings({"config-format": "gguf"})[1][0]


def _consolidated(path, rows):
    """A consolidated.safetensors in Mistral's own tensor names (one bf16 matrix of rows x 64)."""
    import struct
    tensor = {"dtype": "BF16", "shape": [rows, 64], "data_offsets": [0, rows * 64 * 2]}
    header = json.dumps({"layers.0.attention.wq.weight": tensor}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * (rows * 64 * 2))


def test_mistral_s_own_files_are_noticed_and_not_counted_twice(tmp_path):
    """mistralai's repositories hold the weights twice, config.json's shards and consolidated*.safetensors with
    params.json: the headers read are the shards' (by the index, or without one all but the consolidated files)."""
    import shutil
    plain = inspect_weights(sample_checkpoints.write(tmp_path / "plain"))
    assert plain["mistral_format_files"] is False
    both = tmp_path / "both"
    shutil.copytree(tmp_path / "plain", both)
    _consolidated(both / "consolidated.safetensors", 4096)
    found = inspect_weights(str(both))
    assert found["mistral_format_files"] is False                 # no params.json: not Mistral's format
    (both / "params.json").write_text(json.dumps({"dim": 128}))
    found = inspect_weights(str(both))
    assert found["mistral_format_files"] is True and found["measured_bytes"] == plain["measured_bytes"]
    index = [p for p in both.iterdir() if p.name.endswith(".index.json")]
    for path in index:            # without an index every shard but the consolidated ones is read
        path.unlink()
    assert inspect_weights(str(both))["measured_bytes"] == plain["measured_bytes"]
    alone = tmp_path / "alone"    # a directory of consolidated files alone reads them
    alone.mkdir()
    shutil.copy(both / "config.json", alone / "config.json")
    _consolidated(alone / "consolidated.safetensors", 4096)
    assert inspect_weights(str(alone))["files"] == 1
