# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""A checkpoint's config.json -> the model profile the budget needs, and parameter counts.

Pure (no I/O) except read_model_profile().  Profile keys use config.json's own field names.
Families spell the same fact differently; every spelling read is listed in one table below
(FIELD_ALIASES), so a new family is one line.  A field that is absent and has a safe default is
defaulted and named in ``guessed``; a field the reading cannot do without raises
ModelConfigError naming the file and the field.

Parameter counts (absolute numbers) follow the checkpoint layout of gated-MLP decoders:
  attention  q, k, v, o projections (MLA: q_a/q_b or q, kv_a, kv_b, o) per layer; a linear-attention /
             mamba layer's own mixer instead (linear_mixer_params), none on Nemotron-H's MLP-only layers
  mlp        3 x hidden x intermediate (gate, up, down; 2 for squared-ReLU) for a dense layer; for an MoE layer
             every routed expert + shared experts + the router (hidden x experts)
  norms      2 x hidden per layer + the final norm
  embedding  vocab x hidden, plus the same again for an untied lm_head
  total      everything above (every expert is resident); the MTP layers are kept apart
  active     what one token runs through: embedding and head, attention, dense MLPs, and per
             MoE layer the experts per token + shared experts + the router
  mtp        per next-token-prediction layer: one decoder layer of the model's MoE kind, its
             projection (2 x hidden -> hidden) and three norms (embedding and head are shared)
Biases and the small q/k norms are left out (well under 0.01% of any model here).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.hy3.fleet.plugins.module_utils import kv_layout

# Spellings of one fact across families, the first present wins.
FIELD_ALIASES = {
    "num_experts": ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
    "num_experts_per_tok": ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "experts_per_token", "top_k",
                            "moe_k"),
    "num_shared_experts": ("num_shared_experts", "n_shared_experts", "num_shared_expert"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size", "expert_hidden_dim"),
    "dtype": ("dtype", "torch_dtype"),
    "num_nextn_predict_layers": ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers"),
}

# Keys vLLM reads for the model's length; it takes the smallest present
# (vllm/config/model.py, _get_and_verify_max_len: possible_keys).
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_sequence_length", "max_seq_length", "seq_len")
# rope types whose factor vLLM does not apply to the derived length (same function).
ROPE_TYPES_NOT_SCALED = ("su", "longrope", "llama3")

LLAMA4_TYPES = ("llama4", "llama4_text")
# MoE sizes some families give per layer (a list, one entry a layer).
PER_LAYER_FIELDS = ("num_experts", "num_experts_per_tok", "num_shared_experts", "moe_intermediate_size")

# Architectures whose reading is known (anything else: generic dense reading + warning).
KNOWN_MODEL_TYPES = (
    "hy_v3", "hunyuan_v1_moe", "hunyuan_v1_dense", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe",
    "qwen3", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "kimi_k2", "gemma2", "gemma3",
    "gemma3_text", "gpt_oss", "glm4_moe", "phi3", "llava", "mistral3", "qwen2_5_vl", "llama4", "llama4_text",
    # hybrid mamba / linear-attention families whose state fields _linear_state reads
    "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "nemotron_h", "granitemoehybrid", "jamba",
    "lfm2",
    # multimodal Qwen families whose vision tower _vision reads
    "qwen2_vl", "qwen3_vl", "qwen3_vl_moe",
    # read right by the fields above (checked against published config.json files and model cards, stop 15)
    "hunyuan", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "minimax_m2", "step3p5", "mimo", "olmo2", "phi3",
    "nemotron_h_moe", "step3p7",
)

LAYER_FULL, LAYER_SLIDING, LAYER_LINEAR = "full_attention", "sliding_attention", "linear_attention"
LAYER_NONE = "no_cache"     # a layer without attention or state (Nemotron-H's MLP-only and MoE-only layers)
# Per-layer kind names seen in configs -> the profile's four kinds.
LAYER_KIND = {
    "full_attention": LAYER_FULL, "attention": LAYER_FULL, "global": LAYER_FULL, "*": LAYER_FULL,
    "sliding_attention": LAYER_SLIDING, "sliding_window": LAYER_SLIDING, "local": LAYER_SLIDING,
    "linear_attention": LAYER_LINEAR, "mamba": LAYER_LINEAR, "M": LAYER_LINEAR, "linear": LAYER_LINEAR,
    "conv": LAYER_LINEAR,                                  # LFM2 short-convolution layers
    "-": LAYER_NONE, "E": LAYER_NONE, "mlp": LAYER_NONE, "moe": LAYER_NONE,
}
# Nemotron-H's layers each hold one block: mixer ('M', '*') or MLP ('-' dense, 'E' MoE); profile["mlp_layers"].
MLP_DENSE, MLP_MOE = "dense", "moe"
NEMOTRON_MLP = {"-": MLP_DENSE, "E": MLP_MOE}
UNGATED_ACTIVATIONS = ("relu2",)
STATE_MAMBA1, STATE_MAMBA2, STATE_GATED_DELTA_NET, STATE_SHORT_CONV = (
    kv_layout.STATE_MAMBA1, kv_layout.STATE_MAMBA2, kv_layout.STATE_GATED_DELTA_NET, kv_layout.STATE_SHORT_CONV)

# quant_method -> weight bits when the config does not state them.
QUANT_METHOD_BITS = {"fp8": 8, "fbgemm_fp8": 8, "mxfp4": 4, "nvfp4": 4, "modelopt_fp4": 4, "bitnet": 2}
# 4-bit float formats -> weights that share one 8-bit scale (MXFP4: E8M0 per 32; NVFP4: FP8 per 16).
FLOAT4_BLOCK = {"mxfp4": 32, "nvfp4": 16, "modelopt_fp4": 16}

STATUS_READ, STATUS_GENERIC = "read", "generic_fallback"

# Vision towers whose profile-run peak the budget models (engine_memory.encoder_profile_bytes), by the outer
# config's model_type: vLLM's Qwen2-VL processing (Qwen2-VL, Qwen2.5-VL) and Qwen3-VL processing (Qwen3-VL,
# Qwen3-VL-MoE, Qwen3.5, Qwen3.5-MoE: qwen3_5.py's processing info subclasses Qwen3-VL's).
VISION_QWEN2, VISION_QWEN2_5, VISION_QWEN3 = "qwen2_vl", "qwen2_5_vl", "qwen3_vl"
VISION_FAMILIES = {"qwen2_vl": VISION_QWEN2, "qwen2_5_vl": VISION_QWEN2_5, "qwen3_vl": VISION_QWEN3,
                   "qwen3_vl_moe": VISION_QWEN3, "qwen3_5": VISION_QWEN3, "qwen3_5_moe": VISION_QWEN3}
# The published preprocessors' pixel caps (image, video), the dummy media's size when the checkpoint has no
# preprocessor_config.json (Qwen2/2.5-VL: max_pixels 12845056, the video taking the image's; Qwen3-VL and Qwen3.5:
# size.longest_edge 16777216 for images, 25165824 for videos).
VISION_STOCK_PIXELS = {VISION_QWEN2: (12845056, 12845056), VISION_QWEN2_5: (12845056, 12845056),
                       VISION_QWEN3: (16777216, 25165824)}


class ModelConfigError(ValueError):
    """config.json cannot be read into a profile; names the file and the field."""

    status = "bad_config"

    def __init__(self, source, field, problem):
        self.source, self.field, self.problem = source, field, problem
        super(ModelConfigError, self).__init__("%s: %s %s" % (source, field, problem))


def read_model_profile(path, overrides=None):
    """Load config.json at path and return model_profile(); ModelConfigError on any problem.

    overrides: top-level config.json fields merged over the file's (an explicit user override).
    """
    try:
        with open(path) as handle:
            config = json.load(handle)
    except (IOError, OSError) as err:
        raise ModelConfigError(path, "(file)", "cannot be read: %s" % (getattr(err, "strerror", None) or err)) from err
    except ValueError as err:
        raise ModelConfigError(path, "(json)", "is not valid JSON: %s" % err) from err
    if not overrides or not isinstance(config, dict):
        return model_profile(config, source=path)
    try:
        return model_profile(dict(config, **overrides), source=path)
    except ModelConfigError as err:
        if err.field not in overrides:
            raise
        blamed = ModelConfigError("the override merged over %s" % path, err.field, err.problem)
        blamed.status = "bad_override"                   # the user's input, not the checkpoint
        raise blamed from err


def model_profile(config, source="config.json"):
    """The profile of one model from its parsed config.json (see the module docstring); ModelConfigError on any
    field it cannot take, never another exception (a config of an unforeseen shape names itself)."""
    if not isinstance(config, dict):
        raise ModelConfigError(source, "(top level)", "must be a JSON object, got %s" % type(config).__name__)
    try:
        return _model_profile(config, source)
    except ModelConfigError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError) as err:
        raise ModelConfigError(source, "(a field)", "has a shape this reader does not take: %s: %s"
                               % (type(err).__name__, err)) from err


def _model_profile(config, source):
    reader = _Reader(_text_config(config), source, outer=config)
    architecture = (config.get("architectures") or [None])[0]
    model_type = config.get("model_type") or reader.config.get("model_type")
    known = reader.known
    if not known:
        reader.warnings.append(
            "unknown architecture %s (model_type %s): read as a generic dense decoder"
            % (architecture, model_type))
    hidden = reader.positive("hidden_size")
    layers = reader.positive("num_hidden_layers")
    heads = reader.positive("num_attention_heads")
    profile = {
        "architecture": architecture,
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        # Llama 4: intermediate_size is the expert's, intermediate_size_mlp the dense layers' (llama4.py)
        "intermediate_size": reader.positive("intermediate_size_mlp" if reader.config.get("intermediate_size_mlp")
                                             else "intermediate_size", default=4 * hidden),
        "vocab_size": reader.positive("vocab_size"),
        # transformers' PretrainedConfig default when the file is silent (Gemma relies on it)
        "tie_word_embeddings": bool(reader.value("tie_word_embeddings", default=True)),
        "num_attention_heads": heads,
        "num_key_value_heads": reader.positive("num_key_value_heads", default=heads),
        "head_dim": reader.positive("head_dim", default=hidden // heads),
        "max_position_embeddings": _context(reader),
        "dtype": reader.value("dtype", default="bfloat16"),
        "moe": _moe(reader, layers),
        "mla": _mla(reader, layers),
        "num_nextn_predict_layers": int(reader.value("num_nextn_predict_layers") or 0),   # absent: none
        "quantization": quantization(config.get("quantization_config")
                                     or reader.config.get("quantization_config")),
    }
    profile["layer_types"], profile["sliding_window"] = _layer_types(reader, layers)
    profile["mlp_activation"] = reader.config.get("mlp_hidden_act") or reader.config.get("hidden_act")
    pattern = reader.config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == layers:
        profile["mlp_layers"] = [NEMOTRON_MLP.get(block) for block in pattern]
    profile["linear_state"] = _linear_state(reader.config, hidden) if LAYER_LINEAR in profile["layer_types"] else None
    if LAYER_LINEAR in profile["layer_types"] and profile["linear_state"] is None:
        reader.warnings.append("linear-attention/mamba state fields not recognised: those layers are counted with the "
                               "attention shape (parameters approximate) and the state of one layer is taken as one "
                               "head_dim x head_dim fp32 matrix per KV head")
    profile["vision"] = _vision(config, hidden, reader.warnings)
    profile["params"] = count_params(profile)
    profile["guessed"] = reader.guessed
    profile["warnings"] = reader.warnings
    profile["status"] = STATUS_READ if known else STATUS_GENERIC
    profile["source"] = source
    return profile


def _text_config(config):
    """Multimodal configs nest the language model; its fields are what the KV cache and weights follow."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and text.get("num_hidden_layers") else config


class _Reader:
    """Field access that records defaults (guessed) and names the field in errors."""

    def __init__(self, config, source, outer=None):
        # multimodal: the text config first, then the top level (dtype, tied embeddings live there)
        self.config, self.source = config, source
        self.layers = [config] if outer is None or outer is config else [config, outer]
        self.guessed, self.warnings = [], []

    @property
    def known(self):
        """Whether the family's reading is known: the top level's or the text config's model_type is listed."""
        return any(layer.get("model_type") in KNOWN_MODEL_TYPES for layer in self.layers)

    def value(self, field, default=None, required=False):
        for layer in self.layers:
            for name in FIELD_ALIASES.get(field, (field,)):
                if layer.get(name) is not None:
                    return self._one(name, layer[name]) if field in PER_LAYER_FIELDS else layer[name]
        if required:
            raise ModelConfigError(self.source, field, "is missing (needed to size the model)")
        if default is not None:
            self.guessed.append(field)
        return default

    def _one(self, name, value):
        """A per-layer list of a MoE size (Hunyuan-A13B's moe_topk, moe_intermediate_size, num_shared_expert; vLLM
        indexes it by layer): its largest entry, the layer that holds the most."""
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            if len(set(value)) > 1:
                self.warnings.append("%s differs by layer (%s .. %s): the largest is taken"
                                     % (name, min(value), max(value)))
            return max(value)
        return value

    def positive(self, field, default=None):
        value = self.value(field, default=default, required=default is None)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelConfigError(self.source, field, "must be a positive integer, got %r" % (value,))
        return value


def _vision(config, text_hidden, warnings):
    """The vision tower's shape, for its profile run: None for a text-only config; {"family": None} (and a warning)
    for a tower the budget does not model. Qwen2-VL names its width embed_dim (its hidden_size is the language
    model's) and its MLP by mlp_ratio; Qwen2.5-VL's MLP is gated (SwiGLU); Qwen3 towers concatenate their deepstack
    layers' outputs to the final one."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    family = VISION_FAMILIES.get(config.get("model_type"))
    if family is None:
        warnings.append("vision tower (%s) not modelled: the engine's encoder profile run can take more than the "
                        "language model's, which the budget leaves out" % (vision.get("model_type") or "unknown"))
        return {"family": None}
    if family == VISION_QWEN2:
        width = vision.get("embed_dim") or 1280
        intermediate = int(width * (vision.get("mlp_ratio") or 4))
        out_hidden = vision.get("hidden_size") or text_hidden
    else:
        width = vision.get("hidden_size") or 1152
        intermediate = vision.get("intermediate_size") or 4 * width
        out_hidden = vision.get("out_hidden_size") or text_hidden
    heads = vision.get("num_heads") or 16
    image_pixels, video_pixels = VISION_STOCK_PIXELS[family]
    return {
        "family": family, "depth": vision.get("depth"), "hidden_size": width, "intermediate_size": intermediate,
        "num_heads": heads, "head_dim": width // heads, "patch_size": vision.get("patch_size") or 14,
        "spatial_merge_size": vision.get("spatial_merge_size") or 2,
        "temporal_patch_size": vision.get("temporal_patch_size") or 2, "out_hidden_size": out_hidden,
        "deepstack_layers": len(vision.get("deepstack_visual_indexes") or []) if family == VISION_QWEN3 else 0,
        "gated_mlp": family == VISION_QWEN2_5,
        "image_max_pixels": image_pixels, "video_max_pixels": video_pixels, "pixels_source": "stock",
    }


def with_preprocessor_pixels(vision, image_config, video_config=None):
    """The vision profile with the pixel caps of the checkpoint's preprocessor_config.json (image_config: max_pixels,
    else size.longest_edge) and video_preprocessor_config.json (video_config: size.longest_edge; transformers falls
    back to the image file). A modelled tower only; unchanged when neither file names a cap."""
    if not (vision or {}).get("family"):
        return vision
    image = _pixel_cap(image_config, "max_pixels")
    video = _pixel_cap(video_config) or _pixel_cap(image_config)
    if not image and not video:
        return vision
    return dict(vision, image_max_pixels=image or vision["image_max_pixels"],
                video_max_pixels=video or vision["video_max_pixels"], pixels_source="preprocessor")


def _pixel_cap(config, override=None):
    """A processor's pixel cap: size.longest_edge, or the override field that replaces it (the Qwen2-VL image
    processor lets max_pixels overwrite size; the Qwen3-VL video processor reads size alone)."""
    if not isinstance(config, dict):
        return None
    size = config.get("size")
    cap = (config.get(override) if override else None) or (size.get("longest_edge") if isinstance(size, dict) else None)
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


def _context(reader):
    """The longest context vLLM derives: the smallest length key, times the rope factor the way vLLM applies it."""
    lengths = [reader.config[k] for k in CONTEXT_KEYS if isinstance(reader.config.get(k), int)]
    if not lengths:
        reader.guessed.append("max_position_embeddings")
        return 2048                                      # vLLM's own assumption when none is given
    derived = min(lengths)
    rope = reader.config.get("rope_scaling") or reader.config.get("rope_parameters")
    if isinstance(rope, dict) and "gemma3" not in (reader.config.get("model_type") or ""):
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        if rope_type not in ROPE_TYPES_NOT_SCALED:
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = rope["original_max_position_embeddings"]
            derived = int(derived * (rope.get("factor") or 1.0))
    return derived


def _moe(reader, layers):
    experts = reader.value("num_experts")
    if not experts:
        return None
    per_expert = reader.value("moe_intermediate_size")
    if per_expert is None:                                 # Mixtral: intermediate_size is the expert's
        per_expert = reader.positive("intermediate_size")
    shared = reader.value("num_shared_experts")
    shared_size = (reader.config.get("shared_expert_intermediate_size")   # Granite-4.0-H, Nemotron-H spell it so
                   or reader.config.get("shared_intermediate_size")
                   or reader.config.get("moe_shared_expert_intermediate_size"))
    if shared is None:
        # Qwen2-MoE spells one shared expert by its size alone; Llama 4 always has one (vLLM llama4.py
        # n_shared_experts = 1); most others have none.
        shared = 1 if shared_size or reader.config.get("model_type") in LLAMA4_TYPES else 0
    shared_size = shared_size or per_expert
    return {
        "num_experts": experts,
        "num_experts_per_tok": reader.positive("num_experts_per_tok", default=2),
        "num_shared_experts": shared,
        "moe_intermediate_size": per_expert,
        "shared_expert_intermediate_size": shared_size if shared else 0,
        "dense_layers": _dense_layers(reader, layers),
    }


def _dense_layers(reader, layers):
    """Indices of layers with a dense MLP instead of experts."""
    cfg = reader.config
    kinds = cfg.get("mlp_layer_types")                   # Hy3 (transformers 5): "dense" | "sparse"
    if isinstance(kinds, list) and len(kinds) == layers:
        return [i for i, kind in enumerate(kinds) if kind == "dense"]
    dense = set(range(min(int(cfg.get("first_k_dense_replace") or 0), layers)))
    dense.update(i for i in (cfg.get("mlp_only_layers") or []) if 0 <= i < layers)
    # Qwen, and Llama 4's interleave_moe_layer_step: layer i is MoE when (i + 1) % step == 0
    step = int(cfg.get("decoder_sparse_step") or cfg.get("interleave_moe_layer_step") or 1)
    freq = cfg.get("moe_layer_freq") or 1
    if isinstance(freq, list):                            # MiMo-V2: one 0 (dense) / 1 (MoE) a layer
        dense.update(i for i, moe in enumerate(freq[:layers]) if not moe)
        freq = 1
    freq = int(freq)                                      # DeepSeek: layer i is MoE when i % freq == 0
    dense.update(i for i in range(layers) if (i + 1) % step or i % freq)
    return sorted(dense)


def _mla(reader, layers):
    cfg = reader.config
    if not cfg.get("kv_lora_rank"):
        return None
    return {
        "kv_lora_rank": cfg["kv_lora_rank"],
        "qk_rope_head_dim": reader.positive("qk_rope_head_dim"),
        "q_lora_rank": cfg.get("q_lora_rank"),
        "qk_nope_head_dim": reader.positive("qk_nope_head_dim"),
        "v_head_dim": reader.positive("v_head_dim"),
        "indexer": _sparse_indexer(cfg, layers),
    }


def _sparse_indexer(cfg, layers):
    """DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): the lightning indexer keeps a key cache of its own beside the
    latent, index_head_dim fp8 values and one fp32 scale a 128 per token (vllm/models/deepseek_v32 in 0.29.0,
    vllm/model_executor/models/deepseek_v2.py Indexer before), on every layer but those IndexCache skips
    (index_topk_freq / index_topk_pattern; engines from 0.24: engine_memory.sparse_mla_policy). None without
    index_topk (dense MLA)."""
    if cfg.get("index_topk") is None or not cfg.get("index_head_dim"):
        return None
    head = cfg["index_head_dim"]
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, (str, list, tuple)):
        indexed = sum(1 for i in range(layers) if i >= len(pattern) or pattern[i] != "S")
    else:
        every = cfg.get("index_topk_freq") or 1
        offset = 2 if cfg.get("index_skip_topk_offset") is None else cfg["index_skip_topk_offset"]
        indexed = sum(1 for i in range(layers) if max(i - offset + 1, 0) % every == 0)
    return {"bytes_per_token": head + head // kv_layout.INDEXER_QUANT_BLOCK * 4, "indexed_layers": indexed,
            "layers": layers}


def _layer_types(reader, layers):
    """One kind per layer, and the sliding window size (None without sliding layers)."""
    cfg = reader.config
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) is not False else None
    spelled = cfg.get("layer_types") or cfg.get("layers_block_type")
    pattern = cfg.get("hybrid_override_pattern")          # Nemotron-H: "M-M*..." ('-' is an MLP-only layer)
    swa_flags = cfg.get("hybrid_layer_pattern")           # MiMo-V2: 1 a sliding-window layer, 0 a full one
    if isinstance(spelled, list) and len(spelled) == layers:
        kinds = [LAYER_KIND.get(k, LAYER_FULL) for k in spelled]
    elif window and isinstance(swa_flags, list) and len(swa_flags) == layers:
        kinds = [LAYER_SLIDING if flag == 1 else LAYER_FULL for flag in swa_flags]
    elif isinstance(pattern, str) and len(pattern) == layers:
        kinds = [LAYER_KIND.get(k, LAYER_FULL) for k in pattern]
    elif window and cfg.get("sliding_window_pattern"):  # Gemma 3: every Nth layer is global
        every = cfg["sliding_window_pattern"]
        kinds = [LAYER_FULL if (i + 1) % every == 0 else LAYER_SLIDING for i in range(layers)]
    elif window and cfg.get("model_type") == "gemma2":   # Gemma 2 alternates, sliding first
        kinds = [LAYER_SLIDING if i % 2 == 0 else LAYER_FULL for i in range(layers)]
    elif cfg.get("attn_layer_period") and cfg.get("attn_layer_offset") is not None:   # Jamba: one attention layer a period
        period, offset = cfg["attn_layer_period"], cfg["attn_layer_offset"]
        kinds = [LAYER_FULL if i % period == offset else LAYER_LINEAR for i in range(layers)]
    elif cfg.get("full_attention_interval"):             # Qwen3-Next: linear, linear, linear, full
        every = cfg["full_attention_interval"]
        kinds = [LAYER_FULL if (i + 1) % every == 0 else LAYER_LINEAR for i in range(layers)]
    elif window and window < _max_length(cfg) and reader.known:   # Mistral-style: every layer slides
        kinds = [LAYER_SLIDING] * layers
    elif window and window < _max_length(cfg):
        # a family not known to slide every layer may mix in full-attention ones: budget the larger KV
        reader.warnings.append("sliding_window %s without a layer pattern: every layer taken as full attention (the "
                               "larger KV cache)" % window)
        kinds = [LAYER_FULL] * layers
    else:
        kinds = [LAYER_FULL] * layers
    return kinds, (window if LAYER_SLIDING in kinds else None)


def _max_length(cfg):
    return max([cfg[k] for k in CONTEXT_KEYS if isinstance(cfg.get(k), int)] or [0])


def _linear_state(cfg, hidden):
    """The fixed per-request state of one linear-attention / mamba layer, in the config fields each of vLLM's model
    classes passes to MambaStateShapeCalculator (get_mamba_state_shape_from_config in qwen3_next.py, qwen3_5.py,
    nemotron_h.py, granitemoehybrid.py, jamba.py, lfm2.py; 0.29.0). None when no family's fields are there.
    ``ssm_dtype``: the state dtype the config asks for, where vLLM reads it (Qwen3.5's mamba_ssm_dtype,
    Nemotron-H's mamba_ssm_cache_dtype); ``ssm_dtype_rule`` names a model-specific default and ``chunk_size``
    the SSD kernel's chunk (engine_memory.linear_state_policy)."""
    chunk = cfg.get("mamba_chunk_size") or cfg.get("chunk_size")

    def mamba2(intermediate, groups, heads, head_dim, state, conv, **extra):
        values = dict(intermediate_size=intermediate, n_groups=groups, num_heads=heads, head_dim=head_dim,
                      state_size=state, conv_kernel=conv)
        return dict(values, family=STATE_MAMBA2, chunk_size=chunk, **extra) if _all_positive(values) else None

    if cfg.get("linear_num_value_heads"):                 # Gated DeltaNet: Qwen3-Next, Qwen3.5
        values = {"num_k_heads": cfg.get("linear_num_key_heads"), "num_v_heads": cfg.get("linear_num_value_heads"),
                  "head_k_dim": cfg.get("linear_key_head_dim"), "head_v_dim": cfg.get("linear_value_head_dim"),
                  "conv_kernel": cfg.get("linear_conv_kernel_dim")}
        return dict(values, family=STATE_GATED_DELTA_NET, ssm_dtype=cfg.get("mamba_ssm_dtype")) \
            if _all_positive(values) else None
    if cfg.get("mamba_num_heads"):                        # Nemotron-H
        heads, head_dim = cfg.get("mamba_num_heads"), cfg.get("mamba_head_dim")
        return mamba2(heads * (head_dim or 0), cfg.get("n_groups"), heads, head_dim, cfg.get("ssm_state_size"),
                      cfg.get("conv_kernel"), ssm_dtype=cfg.get("mamba_ssm_cache_dtype"), ssm_dtype_rule="nemotron_h")
    expand_size = int((cfg.get("mamba_expand") or 0) * hidden)
    if cfg.get("mamba_n_heads") and not cfg.get("mamba_d_ssm"):   # Granite-4.0-H (not Falcon-H1: attention and
        return mamba2(expand_size, cfg.get("mamba_n_groups"), cfg.get("mamba_n_heads"),   # mamba side by side)
                      cfg.get("mamba_d_head"), cfg.get("mamba_d_state"), cfg.get("mamba_d_conv"))
    if cfg.get("mamba_d_state") and cfg.get("mamba_d_conv") and expand_size:   # Jamba: Mamba-1 layers
        return {"family": STATE_MAMBA1, "intermediate_size": expand_size, "state_size": cfg["mamba_d_state"],
                "conv_kernel": cfg["mamba_d_conv"], "chunk_size": chunk}
    if cfg.get("conv_L_cache") and cfg.get("conv_dim"):  # LFM2: short convolutions
        return {"family": STATE_SHORT_CONV, "conv_dim": cfg["conv_dim"], "conv_kernel": cfg["conv_L_cache"]}
    return None


def _all_positive(values):
    return all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values.values())


def quantization(config):
    """quantization_config -> {method, bits, group_size, weight_type, activation_scheme, ignored_layers} or None
    (unquantized)."""
    if not isinstance(config, dict) or not config:
        return None
    method = str(config.get("quant_method") or config.get("quantization_method") or "unknown").lower()
    bits = config.get("bits") or config.get("w_bit") or config.get("weight_bits")
    group_size = config.get("group_size") or config.get("q_group_size")
    weight_type = "float" if method in FLOAT4_BLOCK else None
    activation_scheme = config.get("activation_scheme")
    for group in (config.get("config_groups") or {}).values():   # compressed-tensors
        weights = (group or {}).get("weights") or {}
        bits = bits or weights.get("num_bits")
        group_size = group_size or weights.get("group_size")
        weight_type = weight_type or weights.get("type")
        activations = (group or {}).get("input_activations")
        if activation_scheme is None and isinstance(activations, dict):
            activation_scheme = "dynamic" if activations.get("dynamic") else "static"
    if config.get("load_in_4bit"):
        bits = 4
    elif config.get("load_in_8bit"):
        bits = 8
    block = config.get("weight_block_size")                     # block-wise fp8 (DeepSeek-V3)
    return {
        "method": method,
        "bits": int(bits or QUANT_METHOD_BITS.get(method, 16)),
        "group_size": group_size or (list(block) if block else None),
        "weight_type": weight_type,     # "int" or "float" (4-bit floats carry one 8-bit scale a block)
        "activation_scheme": activation_scheme,     # "static" or "dynamic" activation scales, or None
        "ignored_layers": _names(config.get("ignored_layers") or config.get("modules_to_not_convert")
                                 or config.get("ignore")),
    }


def _names(value):
    """A list of module names from a config value: a lone name is one name, not its letters."""
    if isinstance(value, str):
        return [value]
    return [str(name) for name in value or []]


# --- parameter counts ---------------------------------------------------------------------------

def attention_params(profile):
    """Parameters of one attention block (q, k, v, o or the MLA projections)."""
    hidden, heads = profile["hidden_size"], profile["num_attention_heads"]
    mla = profile.get("mla")
    if mla:
        qk_head = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        q_lora = mla.get("q_lora_rank")
        q = (hidden * q_lora + q_lora + q_lora * heads * qk_head) if q_lora else hidden * heads * qk_head
        kv_a = hidden * (mla["kv_lora_rank"] + mla["qk_rope_head_dim"]) + mla["kv_lora_rank"]
        kv_b = mla["kv_lora_rank"] * heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"])
        return q + kv_a + kv_b + heads * mla["v_head_dim"] * hidden
    head_dim, kv_heads = profile["head_dim"], profile["num_key_value_heads"]
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def gated_mlp_params(hidden, intermediate, matrices=3):
    """An MLP's parameters: gate, up and down projections, or up and down alone (matrices 2: a squared-ReLU MLP)."""
    return matrices * hidden * intermediate


def shared_expert_params(profile):
    """The shared experts of one MoE layer (0 for a dense model)."""
    moe = profile.get("moe")
    if not moe:
        return 0
    return moe["num_shared_experts"] * gated_mlp_params(profile["hidden_size"], moe["shared_expert_intermediate_size"],
                                                        _mlp_matrices(profile))


def dense_layer_indices(profile):
    """The decoder layers with a dense MLP: the MoE model's first dense layers, or every layer of a dense model
    (Nemotron-H: its MLP-only layers)."""
    mlps = profile.get("mlp_layers")
    if mlps:
        return {i for i, kind in enumerate(mlps) if kind == MLP_DENSE}
    moe = profile.get("moe")
    return set(moe.get("dense_layers") or []) if moe else set(range(profile["num_hidden_layers"]))


def _mlp_matrices(profile):
    """Weight matrices of one MLP: 2 for an ungated squared-ReLU MLP (Nemotron-H's relu2), else 3."""
    return 2 if profile.get("mlp_activation") in UNGATED_ACTIVATIONS else 3


def _moe_layer_count(profile, dense_layers):
    mlps = profile.get("mlp_layers")
    if mlps:
        return mlps.count(MLP_MOE)
    return profile["num_hidden_layers"] - len(dense_layers) if profile.get("moe") else 0


def linear_mixer_params(profile):
    """Parameters of one linear-attention / mamba mixer, by its state family (the projections, convolution and
    per-head tensors of vLLM's GatedDeltaNet, MambaMixer2 and MambaMixer); an unknown family is counted as
    attention."""
    state, hidden = profile.get("linear_state") or {}, profile["hidden_size"]
    family = state.get("family")
    if family == STATE_GATED_DELTA_NET:
        key, value = state["num_k_heads"] * state["head_k_dim"], state["num_v_heads"] * state["head_v_dim"]
        return (hidden * (2 * key + 2 * value + 2 * state["num_v_heads"]) + (2 * key + value) * state["conv_kernel"]
                + 2 * state["num_v_heads"] + state["head_v_dim"] + value * hidden)
    if family == STATE_MAMBA2:
        inner, heads = state["intermediate_size"], state["num_heads"]
        conv_dim = inner + 2 * state["n_groups"] * state["state_size"]
        return (hidden * (inner + conv_dim + heads) + conv_dim * (state["conv_kernel"] + 1) + 3 * heads + inner
                + inner * hidden)
    if family == STATE_MAMBA1:
        inner, rank = state["intermediate_size"], -(-hidden // 16)
        return (hidden * 2 * inner + inner * (state["conv_kernel"] + 1) + inner * (rank + 2 * state["state_size"])
                + rank * inner + inner + inner * state["state_size"] + inner + inner * hidden)
    if family == STATE_SHORT_CONV:
        return hidden * 3 * state["conv_dim"] + state["conv_dim"] * state["conv_kernel"] + state["conv_dim"] * hidden
    return attention_params(profile)


def mixer_params(profile):
    """(every decoder layer's mixer parameters, the attention layers' share): attention, linear-attention /
    mamba, or none (Nemotron-H's MLP-only layers)."""
    attention = attention_params(profile)
    kinds = profile.get("layer_types") or [LAYER_FULL] * profile["num_hidden_layers"]
    attention_layers = sum(1 for kind in kinds if kind in (LAYER_FULL, LAYER_SLIDING))
    linear_layers = sum(1 for kind in kinds if kind == LAYER_LINEAR)
    return attention_layers * attention + linear_layers * linear_mixer_params(profile), attention_layers * attention


def moe_layer_params(profile, experts_counted):
    """One MoE MLP: experts_counted routed experts + the shared experts + the router."""
    moe, hidden = profile["moe"], profile["hidden_size"]
    routed = experts_counted * gated_mlp_params(hidden, moe["moe_intermediate_size"], _mlp_matrices(profile))
    return routed + shared_expert_params(profile) + hidden * moe["num_experts"]


def count_params(profile):
    """{"total", "active", "mtp", "embedding", "attention", "shared_experts", "dense_mlp"}: absolute counts
    from the profile alone (the last three: every decoder layer's attention projections, shared experts and
    dense MLPs, module families some quantizers keep in 16 bits)."""
    hidden, layers = profile["hidden_size"], profile["num_hidden_layers"]
    embedding = profile["vocab_size"] * hidden * (1 if profile["tie_word_embeddings"] else 2)
    mixers, attention = mixer_params(profile)
    dense_mlp = gated_mlp_params(hidden, profile["intermediate_size"], _mlp_matrices(profile))
    moe = profile.get("moe")
    dense_layers = dense_layer_indices(profile)
    moe_layers = _moe_layer_count(profile, dense_layers)
    norms = 2 * hidden * layers + hidden
    common = embedding + norms + mixers + len(dense_layers) * dense_mlp
    total = common + (moe_layers * moe_layer_params(profile, moe["num_experts"]) if moe else 0)
    active = common + (moe_layers * moe_layer_params(profile, moe["num_experts_per_tok"]) if moe else 0)
    mtp_mlp = moe_layer_params(profile, moe["num_experts"]) if moe else dense_mlp
    mtp_layer = attention_params(profile) + mtp_mlp + 2 * hidden * hidden + 5 * hidden   # + eh_proj; 2 layer + 3 mtp norms
    return {"total": total, "active": active, "embedding": embedding, "attention": attention,
            "shared_experts": moe_layers * shared_expert_params(profile), "dense_mlp": len(dense_layers) * dense_mlp,
            "mtp": profile.get("num_nextn_predict_layers", 0) * mtp_layer}
