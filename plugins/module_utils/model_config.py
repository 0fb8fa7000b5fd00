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
import os

from ansible_collections.hy3.fleet.plugins.module_utils import kv_layout

# Spellings of one fact across families, the first present wins.
FIELD_ALIASES = {
    "num_experts": ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
    "num_experts_per_tok": ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "experts_per_token", "top_k",
                            "moe_k", "top_k_experts"),
    "num_shared_experts": ("num_shared_experts", "n_shared_experts", "num_shared_expert", "moe_num_shared_experts"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size", "expert_hidden_dim"),
    "dtype": ("dtype", "torch_dtype"),
    # GPT-2 / GPT-J / BLOOM / Falcon / OPT / ChatGLM name the decoder's shape their own way
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner"),
    "head_dim": ("head_dim", "kv_channels"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
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
    "qwen3", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "kimi_k2", "gemma2", "gemma3", "dbrx",
    "gemma3_text", "gpt_oss", "glm4_moe", "phi3", "llava", "mistral3", "qwen2_5_vl", "llama4", "llama4_text",
    # hybrid mamba / linear-attention families whose state fields _linear_state reads
    "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "nemotron_h", "granitemoehybrid", "jamba",
    "lfm2",
    # multimodal Qwen families whose vision tower _vision reads
    "qwen2_vl", "qwen3_vl", "qwen3_vl_moe",
    # read right by the fields above (checked against published config.json files and model cards, stop 15)
    "hunyuan", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "minimax_m2", "step3p5", "mimo", "olmo2", "phi3",
    "nemotron_h_moe", "step3p7",
    # DeepSeek-V4's compressed attention (_compressed_attention)
    "deepseek_v4",
    # MiMo-V2-Flash: its window and full layers each with their own KV shape (_mimo_v2)
    "mimo_v2_flash",
    # DeciLM's per-layer block_configs (_block_configs)
    "nemotron-nas",
    # Llama-shaped decoders the plain reading covers (Gemma: head_dim given, head tied; Granite: multipliers only)
    "gemma", "granite",
    # the older families named by FIELD_ALIASES' other spellings and UNGATED_MODEL_TYPES
    "gpt2", "gptj", "gpt_neox", "opt", "falcon", "bloom", "phi", "gpt_bigcode", "starcoder2", "chatglm",
    # Gemma 4: its full layers' own KV shape, KV-shared layers, per-layer embeddings, MoE beside the MLP (_gemma4)
    "gemma4", "gemma4_text",
)

# The class-name endings transformers and vLLM give an architecture; what precedes them names the family.
ARCHITECTURE_ENDINGS = ("ForConditionalGeneration", "ForCausalLM", "LMHeadModel", "Model")

# Families whose transformers config class leaves the output embedding untied when config.json says nothing
# (tie_word_embeddings=False in their configuration_*.py, transformers 5.19); PretrainedConfig's own default, and so
# every other family's (Gemma, Cohere, Falcon, OPT, GPT-2 ...), ties it. A multimodal config's text model decides:
# vLLM builds the language model from text_config (mistral3: Mistral-Small-3.1 loads 44.76 GiB, its lm_head apart).
UNTIED_FAMILIES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "phi", "phi3",
    "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss", "granite", "granitemoe", "granitemoehybrid", "glm4",
    "glm4_moe", "olmo2", "olmoe", "gpt_neox", "gptj", "nemotron_h", "jamba", "hunyuan_v1_moe", "hunyuan_v1_dense",
    "minimax_m2", "exaone4", "dbrx", "mllama", "llama4", "llama4_text", "llava", "mistral3", "qwen2_vl",
    "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
    "deepseek_v4", "hy_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "step3p5", "step3p7", "mimo_v2_flash",
    # remote-code classes derived from an untied one (Qwen2's, Llama's)
    "mimo", "nemotron-nas",
)

LAYER_FULL, LAYER_SLIDING, LAYER_LINEAR = "full_attention", "sliding_attention", "linear_attention"
LAYER_NONE = "no_cache"     # a layer without attention or state (Nemotron-H's MLP-only and MoE-only layers)
LAYER_KV_SHARED = kv_layout.KV_SHARED    # attention over an earlier layer's cache, none of its own (Gemma 4)
ATTENTION_KINDS = (LAYER_FULL, LAYER_SLIDING, LAYER_KV_SHARED)    # layers with attention projections
# Per-layer kind names seen in configs -> the profile's four kinds.
LAYER_KIND = {
    "full_attention": LAYER_FULL, "attention": LAYER_FULL, "global": LAYER_FULL, "*": LAYER_FULL,
    "deepseek_sparse_attention": LAYER_FULL,               # GLM-5.2's layer_types: MLA with its indexer
    "sliding_attention": LAYER_SLIDING, "sliding_window": LAYER_SLIDING, "local": LAYER_SLIDING,
    "linear_attention": LAYER_LINEAR, "mamba": LAYER_LINEAR, "M": LAYER_LINEAR, "linear": LAYER_LINEAR,
    "conv": LAYER_LINEAR,                                  # LFM2 short-convolution layers
    "-": LAYER_NONE, "E": LAYER_NONE, "mlp": LAYER_NONE, "moe": LAYER_NONE,
}
# Nemotron-H's layers each hold one block: mixer ('M', '*') or MLP ('-' dense, 'E' MoE); profile["mlp_layers"].
# Its transformers 5 configs spell the blocks as words in layers_block_type (Nemotron-3 Ultra, Nemotron-3.5).
MLP_DENSE, MLP_MOE = "dense", "moe"
NEMOTRON_MLP = {"-": MLP_DENSE, "E": MLP_MOE, "mlp": MLP_DENSE, "moe": MLP_MOE}
UNGATED_ACTIVATIONS = ("relu2",)
# Families whose MLP is two matrices (up, down) whatever the activation is called: GPT-2 / GPT-J / NeoX, OPT,
# Falcon, BLOOM, Phi-1/2, StarCoder / StarCoder2, MPT (their vLLM classes hold fc1 / fc2 or c_fc / c_proj).
UNGATED_MODEL_TYPES = ("gpt2", "gptj", "gpt_neox", "opt", "falcon", "bloom", "phi", "gpt_bigcode", "starcoder2",
                       "mpt")
# Families whose full-attention layers gate their output by a second query-sized projection: vLLM's
# Qwen3NextAttention (qwen3_next.py, used by qwen3_5.py; 0.11 - 0.34) builds qkv_proj with
# num_attention_heads x (1 + attn_output_gate) query heads, the field True when the config is silent.
OUTPUT_GATED_ATTENTION_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
STATE_MAMBA1, STATE_MAMBA2, STATE_GATED_DELTA_NET, STATE_SHORT_CONV = (
    kv_layout.STATE_MAMBA1, kv_layout.STATE_MAMBA2, kv_layout.STATE_GATED_DELTA_NET, kv_layout.STATE_SHORT_CONV)

# quant_method -> weight bits when the config does not state them.
QUANT_METHOD_BITS = {"fp8": 8, "fbgemm_fp8": 8, "mxfp4": 4, "nvfp4": 4, "modelopt_fp4": 4, "bitnet": 2}
# 4-bit float formats -> weights that share one 8-bit scale (MXFP4: E8M0 per 32; NVFP4: FP8 per 16).
FLOAT4_BLOCK = {"mxfp4": 32, "nvfp4": 16, "modelopt_fp4": 16}
# NVIDIA ModelOpt names its format by quant_algo (in config.json's quantization_config, or in the older exports'
# hf_quant_config.json, which vLLM falls back to): (bits, weight type, weights a scale covers or None). A
# MIXED_PRECISION export names one per layer under quantized_layers.
MODELOPT_ALGOS = {"FP8": (8, "float", None), "FP8_PER_CHANNEL_PER_TOKEN": (8, "float", None),
                  "FP8_PB_WO": (8, "float", None), "NVFP4": (4, "float", 16), "W4A16_NVFP4": (4, "float", 16),
                  "MXFP8": (8, "float", 32)}   # vLLM's modelopt.py QUANT_ALGOS (0.29), less MIXED_PRECISION
MODELOPT_MIXED = "MIXED_PRECISION"

STATUS_READ, STATUS_GENERIC = "read", "generic_fallback"
# An older ModelOpt export's quantization, beside config.json (vllm/transformers_utils/config.py falls back to it).
MODELOPT_SIDECAR = "hf_quant_config.json"

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


def _read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError) as err:
        raise ModelConfigError(path, "(file)", "cannot be read: %s" % (getattr(err, "strerror", None) or err)) from err
    except ValueError as err:
        raise ModelConfigError(path, "(json)", "is not valid JSON: %s" % err) from err


def read_model_profile(path, overrides=None):
    """Load config.json at path and return model_profile(); ModelConfigError on any problem.

    overrides: top-level config.json fields merged over the file's (an explicit user override).
    """
    config = _read_json(path)
    if isinstance(config, dict) and not _text_config(config).get("quantization_config") \
            and not config.get("quantization_config"):
        # older ModelOpt exports keep their quantization beside config.json, and vLLM reads it from there
        sidecar = os.path.join(os.path.dirname(path), MODELOPT_SIDECAR)
        if os.path.exists(sidecar):
            quant = _read_json(sidecar)
            section = quant.get("quantization") if isinstance(quant, dict) else None
            if isinstance(section, dict):
                config = dict(config, quantization_config=dict(section, quant_method="modelopt"))
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
    architectures = config.get("architectures")
    architecture = architectures if isinstance(architectures, str) else (architectures or [None])[0]  # one, or a list
    config, family = _with_family(config, architecture)
    reader = _Reader(_text_config(config), source, outer=config)
    if family:
        reader.warnings.append("model_type missing: read as the %s family its architecture %s names"
                               % (family, architecture))
    model_type = config.get("model_type") or reader.config.get("model_type")
    known = reader.known
    if not known:
        reader.warnings.append(
            "unknown architecture %s (model_type %s): read as a generic dense decoder"
            % (architecture, model_type))
    hidden = reader.positive("hidden_size")
    spelled = reader.config.get("layers_block_type")
    # transformers 5's Nemotron-H config derives the count from its block list and may leave the field out
    layers = reader.positive("num_hidden_layers", default=len(spelled) if isinstance(spelled, list) and spelled
                             else None)
    heads = reader.positive("num_attention_heads")
    blocks = _block_configs(reader, layers, hidden, heads)    # DeciLM: per-layer blocks, the top level's sizes null
    profile = {
        "architecture": architecture,
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        # Llama 4: intermediate_size is the expert's, intermediate_size_mlp the dense layers' (llama4.py)
        "intermediate_size": (max(blocks["mlp_sizes"]) or 4 * hidden) if blocks else reader.positive(
            "intermediate_size_mlp" if reader.config.get("intermediate_size_mlp") else "intermediate_size",
            default=4 * hidden),
        "vocab_size": reader.positive("vocab_size"),
        # transformers' PretrainedConfig default when the file is silent (Gemma relies on it)
        "tie_word_embeddings": bool(reader.value("tie_word_embeddings", default=_tied_by_default(reader))),
        "num_attention_heads": heads,
        "num_key_value_heads": (blocks["num_key_value_heads"] if blocks
                                else reader.positive("num_key_value_heads", default=_default_kv_heads(reader, heads))),
        "head_dim": reader.positive("head_dim", default=hidden // heads),
        "max_position_embeddings": _context(reader),
        "dtype": reader.value("dtype", default="bfloat16"),
        "moe": _moe(reader, layers),
        "mla": _mla(reader, layers),
        "compressed_attention": _compressed_attention(reader, layers),
        "num_nextn_predict_layers": int(reader.value("num_nextn_predict_layers") or 0),   # absent: none
        "attention_output_gate": _attention_output_gate(reader),
        "quantization": quantization(config.get("quantization_config")
                                     or reader.config.get("quantization_config"), reader.value("expert_dtype")),
    }
    # V4 keeps its window beside every layer's compressed cache (kv_layout.compressed_layout): no sliding layers
    profile["layer_types"], profile["sliding_window"] = (([LAYER_FULL] * layers, None)
                                                         if profile["compressed_attention"] else _layer_types(reader, layers))
    # the window the config sets, whether or not the budget slides any layer by it (vLLM's get_sliding_window)
    profile["config_sliding_window"] = _config_sliding_window(reader)
    if blocks:
        profile["layer_types"] = blocks["layer_types"]
        profile["mlp_sizes"] = blocks["mlp_sizes"]
    _gemma4(reader, profile)
    _mimo_v2(reader.config, profile)
    profile["mlp_activation"] = reader.config.get("mlp_hidden_act") or reader.config.get("hidden_act")
    mixers = _spelled_blocks(reader.config, layers)
    if mixers and any(block in NEMOTRON_MLP for block in mixers):
        profile["mlp_layers"] = [NEMOTRON_MLP.get(block) for block in mixers]
    profile["linear_state"] = _linear_state(reader.config, hidden) if LAYER_LINEAR in profile["layer_types"] else None
    if LAYER_LINEAR in profile["layer_types"] and profile["linear_state"] is None:
        reader.warnings.append("linear-attention/mamba state fields not recognised: those layers are counted with the "
                               "attention shape (parameters approximate) and the state of one layer is taken as one "
                               "head_dim x head_dim fp32 matrix per KV head")
    _check_state_dtype(reader, profile["linear_state"])
    profile["vision"] = _vision(config, hidden, reader)
    # the multimodal towers' weights: vision and, where config.json has one, audio (budget.py counts them as one)
    audio = audio_tower_params(config, hidden)
    profile["audio_tower"] = audio > 0
    profile["vision_params"] = vision_tower_params(config, hidden) + audio
    profile["vision_replicated"] = (config.get("vision_config") or {}).get("model_type") in REPLICATED_VISION_TYPES
    profile["rope_tables"] = _rope_tables(reader, profile)
    profile["params"] = count_params(profile)
    profile["guessed"] = reader.guessed
    profile["warnings"] = reader.warnings
    profile["status"] = STATUS_READ if known else STATUS_GENERIC
    profile["source"] = source
    return profile


def _attention_output_gate(reader):
    """Whether the attention layers carry an output gate as wide as their queries (OUTPUT_GATED_ATTENTION_TYPES)."""
    return _text_family(reader) in OUTPUT_GATED_ATTENTION_TYPES and bool(reader.value("attn_output_gate", default=True))


def _with_family(config, architecture):
    """(config, family): a config that names no model_type (a trimmed or hand-written config.json) takes the known
    family its architecture's class spells, compared without case and underscores (Qwen3MoeForCausalLM: qwen3_moe,
    MiniMaxM2ForCausalLM: minimax_m2), since vLLM picks its implementation by the architecture; family is None
    where the config names one or no known family matches."""
    text = _text_config(config)
    if config.get("model_type") or text.get("model_type") or not isinstance(architecture, str):
        return config, None
    stem = architecture
    for ending in ARCHITECTURE_ENDINGS:
        if stem.endswith(ending) and len(stem) > len(ending):
            stem = stem[:-len(ending)]
            break
    spelled = {family.replace("_", "").lower(): family for family in KNOWN_MODEL_TYPES}
    family = spelled.get(stem.replace("_", "").lower())
    return (dict(config, model_type=family), family) if family else (config, None)


def _tied_by_default(reader):
    """What a config silent on tie_word_embeddings means: its class's default (UNTIED_FAMILIES), the text model's
    family first."""
    return _text_family(reader) not in UNTIED_FAMILIES


def _text_family(reader):
    """The model_type a class default follows: the text model's, else the outer config's."""
    return reader.config.get("model_type") or reader.layers[-1].get("model_type")


# Where multimodal configs nest their language model: text_config in transformers' own classes, llm_config in
# InternVL's and Ovis's remote code, language_config in DeepSeek-VL2's.
LANGUAGE_CONFIG_FIELDS = ("text_config", "llm_config", "language_config")


def _text_config(config):
    """Multimodal configs nest the language model; its fields are what the KV cache and weights follow."""
    for field in LANGUAGE_CONFIG_FIELDS:
        text = config.get(field)
        if isinstance(text, dict) and text.get("num_hidden_layers"):
            return text
    if config.get("model_type") == "dbrx":
        return _dbrx(config)
    return config


def _dbrx(config):
    """DBRX nests its KV heads in attn_config and its experts in ffn_config (vLLM dbrx.py reads
    attn_config.kv_n_heads, ffn_config.moe_num_experts / moe_top_k / ffn_hidden_size): lifted to the top level."""
    attention, ffn = config.get("attn_config") or {}, config.get("ffn_config") or {}
    lifted = {"num_key_value_heads": attention.get("kv_n_heads"), "num_local_experts": ffn.get("moe_num_experts"),
              "num_experts_per_tok": ffn.get("moe_top_k"), "intermediate_size": ffn.get("ffn_hidden_size")}
    return dict(config, **{key: value for key, value in lifted.items() if value is not None})


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
        return self.family_in(KNOWN_MODEL_TYPES)

    def family_in(self, families):
        """Whether the text config's or the top level's model_type is one of families."""
        return any(layer.get("model_type") in families for layer in self.layers)

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


def _vision(config, text_hidden, reader):
    """The vision tower's shape, for its profile run: None for a text-only config; {"family": None} (and a warning)
    for a tower the budget does not model. Qwen2-VL names its width embed_dim (its hidden_size is the language
    model's) and its MLP by mlp_ratio; Qwen2.5-VL's MLP is gated (SwiGLU); Qwen3 towers concatenate their deepstack
    layers' outputs to the final one."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    family = VISION_FAMILIES.get(config.get("model_type"))
    if family is None:
        reader.warnings.append("vision tower (%s) not modelled: the engine's encoder profile run can take more than "
                               "the language model's, which the budget leaves out" % (vision.get("model_type") or "unknown"))
        return {"family": None}
    for field in VISION_SIZE_FIELDS:       # a modelled tower's profile run is sized from these
        value = vision.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ModelConfigError(reader.source, "vision_config." + field, "must be a positive integer, got %r" % (value,))
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


VISION_SIZE_FIELDS = ("depth", "embed_dim", "hidden_size", "intermediate_size", "num_heads", "patch_size",
                      "spatial_merge_size", "temporal_patch_size", "out_hidden_size")


# A vision tower's fields under the names its families give them, the first present winning: Qwen2-VL names its
# width embed_dim (its hidden_size is the language model's), towers their depth depth or num_hidden_layers, and
# Llama 3.2 Vision adds num_global_layers to its local ones.
VISION_WIDTH_FIELDS = ("embed_dim", "hidden_size", "width", "vt_hidden_size")           # vt_: Kimi-K2.5's MoonViT
VISION_DEPTH_FIELDS = ("depth", "num_hidden_layers", "num_layers", "layers", "vt_num_hidden_layers")
# SwiGLU towers (Qwen2.5-VL, Pixtral, GLM-4V) declare silu, and Gemma 4's tower is gated GELU (vLLM gemma4_mm.py
# packs its gate_proj and up_proj); the other GELU ones (SigLIP, Qwen2/3-VL, Llama 4, MoonViT, InternViT, Mllama)
# have a two-matrix MLP.
GATED_VISION_ACTIVATIONS = ("silu", "swiglu")
GATED_VISION_TYPES = ("gemma4_vision",)
# Towers vLLM builds from transformers' own classes with every linear replicated, so each tensor-parallel rank holds
# the whole tower (gemma4_mm.py: AutoModel.from_config, then recursive_replace_linear style "replicate", 0.29).
REPLICATED_VISION_TYPES = ("gemma4_vision",)


def _first(config, fields):
    return next((config[field] for field in fields if isinstance(config.get(field), int) and config[field] > 0), None)


def vision_tower_params(config, text_hidden):
    """A floor of the vision tower's parameters from config.json's vision_config, which vLLM loads beside the language
    model (the shard headers count them; unread here they would be missing from a config-only estimate): per layer
    the four attention projections, the MLP (three matrices when gated) and two norms, the patch embedding, and the
    projector's one matrix from the tower's (merged) width to the language model's, the part every projector has.
    Position tables, biases and deeper projectors are left out, so the count stays a floor. 0 for a text-only config
    or a tower whose width or depth is not named."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    width, depth = _first(vision, VISION_WIDTH_FIELDS), _first(vision, VISION_DEPTH_FIELDS)
    if not width or not depth:
        return 0
    depth += vision.get("num_global_layers") or 0
    ratio = vision.get("mlp_ratio")
    intermediate = (vision.get("intermediate_size") or vision.get("vt_intermediate_size")
                    or int(width * (ratio if isinstance(ratio, (int, float)) else 4)))
    gated = (str(vision.get("hidden_act") or "").lower() in GATED_VISION_ACTIVATIONS
             or vision.get("model_type") in GATED_VISION_TYPES)
    matrices = 3 if gated else 2
    layer = 4 * width * width + matrices * width * intermediate + 4 * width
    patch = vision.get("patch_size") if isinstance(vision.get("patch_size"), int) else 14
    embedding = (vision.get("num_channels") or 3) * (vision.get("temporal_patch_size") or 1) * patch * patch * width
    kernel = vision.get("merge_kernel_size")                     # Kimi-K2.5: [2, 2]
    merge = (vision.get("spatial_merge_size") or config.get("spatial_merge_size")
             or (kernel[0] if isinstance(kernel, list) and kernel and isinstance(kernel[0], int) else 1))
    return int(depth * layer + embedding + width * merge * merge * text_hidden)


# Audio towers vLLM loads beside the language model where config.json has an audio_config (gemma4_mm.py and
# gemma3n_mm.py build it as the "audio" modality's tower; qwen2_audio.py its Whisper-style encoder). Gemma 3n's and
# Gemma 4's are USM conformers: per layer two macaron feed-forward blocks four times as wide (two matrices each), five
# attention projections (query, key, value, output and the relative position's) and the light convolution's gated
# input and its output projections, 24 squares of the width in all. Whisper-style encoders (Qwen2-Audio, the Omni
# models' thinker) name their width d_model and their feed-forward encoder_ffn_dim.
CONFORMER_AUDIO_TYPES = ("gemma3n_audio", "gemma4_audio")
CONFORMER_LAYER_SQUARES = 24
AUDIO_WIDTH_FIELDS = ("hidden_size", "d_model")
AUDIO_DEPTH_FIELDS = ("num_hidden_layers", "conf_num_hidden_layers", "encoder_layers")


def audio_tower_params(config, text_hidden):
    """A floor of the audio tower's parameters from config.json's audio_config: its layers (a conformer's 24 squares of
    the width, a Whisper-style layer's four attention projections and two feed-forward matrices), its output
    projection where it names one (output_proj_dims) and the projector's one matrix into the language model. 0 for a
    config without an audio tower or one whose layers it cannot size; convolutions, norms and biases are left out."""
    audio = config.get("audio_config")
    if not isinstance(audio, dict):
        return 0
    width, depth = _first(audio, AUDIO_WIDTH_FIELDS), _first(audio, AUDIO_DEPTH_FIELDS)
    feed_forward = audio.get("encoder_ffn_dim")
    if not width or not depth:
        return 0
    if audio.get("model_type") in CONFORMER_AUDIO_TYPES:
        layer = CONFORMER_LAYER_SQUARES * width * width
    elif isinstance(feed_forward, int) and feed_forward > 0:
        layer = 4 * width * width + 2 * width * feed_forward
    else:
        return 0
    output = _first(audio, ("output_proj_dims",)) or width
    return int(depth * layer + (width * output if output != width else 0) + output * text_hidden)


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
    if isinstance(rope, dict) and not any("gemma3" in (layer.get("model_type") or "") for layer in reader.layers):
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        if rope_type not in ROPE_TYPES_NOT_SCALED:
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = rope["original_max_position_embeddings"]
            derived = int(derived * (rope.get("factor") or 1.0))
    return derived


# Families whose attention takes no rotary embedding (learned or ALiBi positions, or none: Jamba's, Nemotron-H's and
# Kimi-Linear's attention layers), so they build no cos/sin table (their vLLM classes never call get_rope).
NO_ROPE_MODEL_TYPES = ("opt", "gpt2", "gpt_bigcode", "bloom", "mpt", "jamba", "nemotron_h", "kimi_linear", "mamba",
                       "mamba2", "falcon_mamba")
# How many positions a rope type's cos/sin table spans (vllm/model_executor/layers/rotary_embedding, 0.11 - 0.34):
# the config's max_position_embeddings, that times the factor (linear, dynamic NTK: by 0.25 the latter spans the
# context alone, tens of MiB taken as before), or the original length times it (YaRN, DeepSeek's YaRN); LongRoPE keeps
# a short and a long table.
ROPE_SPAN_BY_FACTOR = ("linear", "dynamic")
ROPE_SPAN_BY_ORIGINAL = ("yarn", "deepseek_yarn", "deepseek_llama_scaling")
ROPE_SPAN_SHORT_AND_LONG = ("longrope", "su")
# MRoPE (Qwen2-VL and its successors) builds its table four times longer, for long videos' position ids (mrope.py).
MROPE_SPAN = 4


def _rope_tables(reader, profile):
    """The cos/sin tables the model builds while it loads: one per distinct rope of its attention layers (vLLM's
    get_rope shares a table between layers with the same rope), each {"positions", "width", "element_bytes"}: a table
    of positions x width values (element_bytes None: in the model's dtype), kept on the GPU as a buffer and so inside
    "Model loading took" but in no checkpoint file. Llama 4's 10M-position table is 2.5 GiB; Gemma 3's linear x8 one
    0.5 GiB."""
    cfg = reader.config
    if reader.family_in(NO_ROPE_MODEL_TYPES) or cfg.get("alibi") or \
            cfg.get("position_embedding_type") not in (None, "rope"):
        return []
    positions = cfg.get("max_position_embeddings") or cfg.get("seq_length")       # ChatGLM names it seq_length
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return []
    mla = profile.get("mla")
    head = mla["qk_rope_head_dim"] if mla else cfg.get("qk_rope_head_dim") or profile["head_dim"]
    # a KV-shared layer (Gemma 4) is a full or sliding one and takes that kind's rope
    kinds = set(profile["layer_types"]) & {LAYER_FULL, LAYER_SLIDING}
    element = FP32_ROPE_BYTES if reader.family_in(FP32_ROPE_FAMILIES) else None
    tables = []
    for kind, rope in _ropes_by_layer_kind(reader, kinds):
        size = (profile.get("kv_shapes") or {}).get(kind, {}).get("head_dim", head) if not mla else head
        table = _rope_table(rope, size, positions, cfg)
        if table:
            table["element_bytes"] = element
            tables.append(table)
    tables += _second_ropes(cfg, profile, tables)
    return [table for i, table in enumerate(tables) if table not in tables[:i]]


def _second_ropes(cfg, profile, tables):
    """The tables a model builds beside its attention's rope: DeepSeek-V4's compressed layers rope at
    compress_rope_theta (models/deepseek_v4 build_deepseek_v4_rope, 0.20 - 0.34), and a sparse indexer ropes its keys
    NeoX-style unless indexer_rope_interleave says otherwise, a get_rope key of its own (deepseek_v2.py, 0.19)."""
    if not tables:
        return []
    first = tables[0]
    extra = []
    compressed = profile.get("compressed_attention")
    if compressed and cfg.get("compress_rope_theta") and any(ratio > 1 for ratio in compressed["ratios"]):
        extra.append(dict(first, theta=cfg["compress_rope_theta"]))
    if (profile.get("mla") or {}).get("indexer") and not cfg.get("indexer_rope_interleave"):
        extra.append(dict(first, neox=True))
    return extra


# Gemma 3 (and 3n) rope their sliding layers with the default rope at rope_local_base_freq (transformers' default
# 10000), whatever rope_scaling their global layers take (gemma3.py, gemma3n.py, 0.11 - 0.34).
LOCAL_ROPE_FAMILIES = ("gemma3", "gemma3_text", "gemma3n", "gemma3n_text")
LOCAL_ROPE_BASE = 10000.0
# Families whose rope tables stay float32 whatever the model's dtype: gpt-oss, MiniMax-Text-01 and Bailing's linear
# models pass dtype=torch.float32 to get_rope; DeepSeek-V4's scaling rope registers an fp32 cache.
FP32_ROPE_FAMILIES = ("gpt_oss", "minimax_text_01", "bailing_moe_linear", "deepseek_v4")
FP32_ROPE_BYTES = 4
# Dual-chunk attention (Qwen2.5-1M) keeps, beside the keys' table over every position, four query tables over
# chunk_size - local_size positions (dual_chunk_rope.py).
DUAL_CHUNK_QUERY_TABLES = 4


def _ropes_by_layer_kind(reader, kinds):
    """(layer kind, rope parameters) for each attention kind the model has: a transformers 5 config keys its
    rope_parameters by layer type (Gemma 3 and 4); an older Gemma 3's local layers take LOCAL_ROPE_FAMILIES' rope."""
    cfg = reader.config
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        return []
    if rope and all(isinstance(value, dict) for value in rope.values()):
        return [(kind, rope[kind]) for kind in sorted(kinds) if kind in rope]
    pairs = []
    for kind in sorted(kinds):
        if kind == LAYER_SLIDING and reader.family_in(LOCAL_ROPE_FAMILIES):
            pairs.append((kind, {"rope_type": "default",
                                 "rope_theta": cfg.get("rope_local_base_freq") or LOCAL_ROPE_BASE}))
        else:
            pairs.append((kind, dict({"rope_theta": cfg.get("rope_theta")}, **rope)))
    return pairs


def _rotary_share(rope, cfg, head):
    """The share of the head the rope turns: partial_rotary_factor (rope parameters first), rotary_pct,
    rotary_emb_fraction, or rotary_dim over the head (MiniMax-M2, GPT-J)."""
    for value in (rope.get("partial_rotary_factor"), cfg.get("partial_rotary_factor"), cfg.get("rotary_pct"),
                  cfg.get("rotary_emb_fraction")):
        if value:
            return value
    rotary = cfg.get("rotary_dim")
    return rotary / float(head) if isinstance(rotary, int) and not isinstance(rotary, bool) and rotary > 0 else 1.0


def _rope_table(rope, head, positions, cfg):
    """{"positions", "width", "theta", "type"} of one rope's table (its theta and type keep two ropes of one shape
    apart, as get_rope's key does), None for a rope the reader cannot size."""
    kind = rope.get("rope_type") or rope.get("type") or "default"
    factor = rope.get("factor") or 1.0
    original = rope.get("original_max_position_embeddings") or positions
    partial = _rotary_share(rope, cfg, head)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (factor, original, partial)):
        return None
    # Gemma 4's proportional rope pads the unrotated dimensions into a full head-wide table (gemma4_rope.py)
    width = head if kind == "proportional" else int(head * min(partial, 1.0))
    dual = cfg.get("dual_chunk_attention_config")
    if isinstance(dual, dict) and isinstance(dual.get("chunk_size"), int):
        span = positions + DUAL_CHUNK_QUERY_TABLES * max(0, dual["chunk_size"] - (dual.get("local_size") or 0))
        kind = "dual_chunk"
    elif kind in ROPE_SPAN_BY_FACTOR and not rope.get("alpha"):
        span = int(positions * factor)
    elif kind in ROPE_SPAN_BY_ORIGINAL:
        span = int(original * factor)
    elif kind in ROPE_SPAN_SHORT_AND_LONG:
        span = original + positions
    else:
        span = positions
    if rope.get("mrope_section") or kind == "mrope":
        span *= MROPE_SPAN
    return {"positions": span, "width": width, "theta": rope.get("rope_theta"), "type": kind}


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
        shared = 1 if shared_size or reader.family_in(LLAMA4_TYPES) else 0
    shared_size = shared_size or per_expert
    return {
        "num_experts": experts,
        "num_experts_per_tok": reader.positive("num_experts_per_tok", default=2),
        "num_shared_experts": shared,
        "moe_intermediate_size": per_expert,
        "shared_expert_intermediate_size": shared_size if shared else 0,
        "dense_layers": _dense_layers(reader, layers),
        # Nemotron-3-Super: the routed experts run in a latent this wide, projected from and back to hidden_size
        # (vLLM nemotron_h.py fc1_latent_proj / fc2_latent_proj); None: they run at hidden_size
        "latent_size": reader.config.get("moe_latent_size") or None,
        "router": _router(reader),
    }


def _router(reader):
    """How the router scores and picks experts, as vLLM's MoE layers take it from config.json (scoring_func,
    norm_topk_prob as renormalize, the expert bias of a noaux_tc router, n_group, routed_scaling_factor): it decides
    which expert kernels take the model (engine_memory._trtllm_bf16_takes); "custom" for the families whose model code
    routes by a function of its own (Gemma 4)."""
    cfg = reader.config
    if reader.family_in(("gemma4", "gemma4_text")):
        return {"scoring": "custom"}
    return {"scoring": str(cfg.get("scoring_func") or "softmax").lower(),
            "renormalize": cfg.get("norm_topk_prob") is not False,
            "bias": cfg.get("topk_method") == "noaux_tc" or bool(cfg.get("moe_router_enable_expert_bias")),
            "groups": cfg.get("n_group") if isinstance(cfg.get("n_group"), int) else 0,
            "scaling": cfg.get("routed_scaling_factor")}


def _text_index(value):
    """An integer layer field, or a [text, vision] pair's first entry; None otherwise."""
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dense_layers(reader, layers):
    """Indices of layers with a dense MLP instead of experts."""
    cfg = reader.config
    kinds = cfg.get("mlp_layer_types")                   # Hy3 (transformers 5): "dense" | "sparse"
    if isinstance(kinds, list) and len(kinds) == layers:
        return [i for i, kind in enumerate(kinds) if kind == "dense"]
    # ERNIE 4.5: experts from moe_layer_start_index to moe_layer_end_index, every moe_layer_interval (its VL models
    # list [text, vision] values, the text model's first: vLLM ernie45_vl_moe.py)
    start, end, interval = (_text_index(cfg.get(field)) for field in
                            ("moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval"))
    dense = set(range(min(int(cfg.get("first_k_dense_replace") or start or 0), layers)))
    if end is not None and end >= 0:
        dense.update(range(end + 1, layers))
    if interval is not None and interval > 1:
        dense.update(i for i in range(layers) if (i + 1) % interval)
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
            "layers": layers, "head_dim": head, "heads": cfg.get("index_n_heads") or 0}


# The compress ratios vLLM's V4 attention takes (compressor.py raises "Invalid compress ratio" for others): 0 or 1, the
# window alone; 4, with an indexer; 128.
DSV4_RATIOS = (0, 1, 4, 128)
# V4's attention fields with the defaults of DeepSeek-V4-Flash's config.json.
DSV4_FIELDS = {"sliding_window": 128, "head_dim": 512, "index_head_dim": 128, "index_n_heads": 64,
               "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "index_topk": 512}


def _compressed_attention(reader, layers):
    """DeepSeek-V4's attention (vLLM deepseek_v4, from 0.20): one 512-wide KV head a layer kept as a sliding window
    and, where compress_ratios gives the layer a ratio over 1, compressed every ratio tokens (ratio 4 layers with a
    lightning indexer); queries from a q_lora_rank latent, output through o_groups low-rank groups. None for configs
    without compress_ratios; a ModelConfigError for one that vLLM would refuse. compress_ratios has one entry a
    decoder layer, then the MTP layers' (which keep the window alone)."""
    ratios = reader.config.get("compress_ratios")
    if ratios is None:
        return None
    if not isinstance(ratios, list) or len(ratios) < layers or any(
            not isinstance(r, int) or isinstance(r, bool) or r not in DSV4_RATIOS for r in ratios):
        raise ModelConfigError(reader.source, "compress_ratios", "must list one of %s for each of the %d layers, got %r"
                               % (DSV4_RATIOS, layers, ratios))
    fields = {field: reader.positive(field, default=default) for field, default in DSV4_FIELDS.items()}
    return {"ratios": ratios[:layers], "window": fields["sliding_window"], "head_dim": fields["head_dim"],
            "index_head_dim": fields["index_head_dim"], "index_heads": fields["index_n_heads"],
            "q_lora_rank": fields["q_lora_rank"], "o_lora_rank": fields["o_lora_rank"], "o_groups": fields["o_groups"],
            "index_topk": fields["index_topk"]}


def compressed_attention_params(compressed, hidden, heads, ratio):
    """(parameters, those held whole on every tensor-parallel rank, those of them vLLM keeps unquantized) of one V4
    attention layer of this compress ratio (vllm/models/deepseek_v4/attention.py and compressor.py, 0.32):
    fused_wqa_wkv (replicated), wq_b, wo_a, wo_b; a compressor over ratio > 1 layers, two windows wide at ratio 4
    (replicated, quant_config None); at ratio 4 the indexer's wq_b (replicated), weights_proj and own compressor
    (replicated, unquantized)."""
    head, q_lora = compressed["head_dim"], compressed["q_lora_rank"]
    o_lora, groups = compressed["o_lora_rank"], compressed["o_groups"]
    whole = hidden * (q_lora + head)
    split = q_lora * heads * head + heads * head * o_lora + groups * o_lora * hidden
    unquantized = hidden * 2 * (2 if ratio == 4 else 1) * head if ratio > 1 else 0
    if ratio == 4:
        index_head, index_heads = compressed["index_head_dim"], compressed["index_heads"]
        whole += q_lora * index_heads * index_head
        unquantized += hidden * index_heads + hidden * 2 * 2 * index_head
    return split + whole + unquantized, whole + unquantized, unquantized


def _config_sliding_window(reader):
    """The sliding window the config sets: None where use_sliding_window says no (Qwen2), as vLLM reads it."""
    cfg = reader.config
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) is not False else None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ModelConfigError(reader.source, "sliding_window", "must be a token count, got %r" % (window,))
    return window


def _layer_types(reader, layers):
    """One kind per layer, and the sliding window size (None without sliding layers)."""
    cfg = reader.config
    window = _config_sliding_window(reader)
    spelled = cfg.get("layer_types") or cfg.get("layers_block_type")
    pattern = cfg.get("hybrid_override_pattern")          # Nemotron-H: "M-M*..." ('-' is an MLP-only layer)
    swa_flags = cfg.get("hybrid_layer_pattern")           # MiMo-V2: 1 a sliding-window layer, 0 a full one
    if isinstance(spelled, list) and len(spelled) == layers:
        kinds = [LAYER_KIND.get(k, LAYER_FULL) for k in spelled]
        unknown = sorted({str(k) for k in spelled if k not in LAYER_KIND})
        if unknown:
            reader.warnings.append("layer kinds %s not recognised: those layers taken as full attention" % unknown)
    elif window and isinstance(swa_flags, list) and len(swa_flags) == layers:
        kinds = [LAYER_SLIDING if flag == 1 else LAYER_FULL for flag in swa_flags]
    elif isinstance(pattern, str) and len(pattern) == layers:
        kinds = [LAYER_KIND.get(k, LAYER_FULL) for k in pattern]
    elif window and isinstance(cfg.get("sliding_window_pattern"), str) and cfg["sliding_window_pattern"] and \
            set(cfg["sliding_window_pattern"]) <= {"L", "G"}:      # EXAONE 4: "LLLG", local / global, repeated
        letters = cfg["sliding_window_pattern"]
        kinds = [LAYER_SLIDING if letters[i % len(letters)] == "L" else LAYER_FULL for i in range(layers)]
    elif window and isinstance(cfg.get("sliding_window_pattern"), int):  # Gemma 3: every Nth layer is global
        every = cfg["sliding_window_pattern"]
        kinds = [LAYER_FULL if (i + 1) % every == 0 else LAYER_SLIDING for i in range(layers)]
    elif window and reader.family_in(("gemma2",)):    # Gemma 2 alternates, sliding first
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


def _spelled_blocks(cfg, layers):
    """Nemotron-H's block a layer, as hybrid_override_pattern's letters or layers_block_type's words; None when the
    config spells neither for every layer."""
    for blocks in (cfg.get("hybrid_override_pattern"), cfg.get("layers_block_type")):
        if isinstance(blocks, (str, list)) and len(blocks) == layers:
            return list(blocks)
    return None


def _default_kv_heads(reader, heads):
    """KV heads when no field names them: one for Falcon's multi-query attention (multi_query without the new
    decoder architecture, vLLM falcon.py), else every attention head."""
    cfg = reader.config
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        return 1
    return heads


def _block_configs(reader, layers, hidden, heads):
    """DeciLM / nemotron-nas (Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B) as vLLM builds it
    (nemotron_nas.py DeciLMDecoderLayer, 0.29): one block_configs entry a layer, whose attention is gone (no_op) or
    has num_attention_heads // n_heads_in_group KV heads, and whose FFN is gone (no_op) or ffn_mult wide -
    int(2 x ffn_mult x hidden / 3) rounded up to 256 (_ffn_mult_to_intermediate_size) - or intermediate_size wide.
    vLLM reads no replace_with_linear: such a block is built as the others, with a warning. None for other configs.
    Layers whose KV heads differ are taken at the largest (the larger cache), with a warning."""
    blocks = reader.config.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != layers or not all(isinstance(b, dict) for b in blocks):
        return None
    kinds, kv_heads, sizes = [], set(), []
    for index, block in enumerate(blocks):
        attention, ffn = block.get("attention") or {}, block.get("ffn") or {}
        if attention.get("replace_with_linear") or ffn.get("replace_with_linear"):
            reader.warnings.append("block_configs[%d]: replace_with_linear, which vLLM does not read: budgeted as the "
                                   "block it builds" % index)
        kinds.append(LAYER_NONE if attention.get("no_op") else LAYER_FULL)
        if not attention.get("no_op"):
            group = attention.get("n_heads_in_group")
            if not isinstance(group, int) or group <= 0:
                raise ModelConfigError(reader.source, "block_configs[%d].attention.n_heads_in_group" % index,
                                       "must be a positive integer for an attention block, got %r" % (group,))
            kv_heads.add(heads // group)
        sizes.append(0 if ffn.get("no_op") else _ffn_width(ffn, hidden, reader.source, index))
    if len(kv_heads) > 1:
        reader.warnings.append("block_configs: attention layers with %s KV heads; every one taken at the largest"
                               % sorted(kv_heads))
    return {"layer_types": kinds, "num_key_value_heads": max(kv_heads or {heads}), "mlp_sizes": sizes}


def _ffn_width(ffn, hidden, source, index):
    """One DeciLM FFN's intermediate size: from ffn_mult where given, else its intermediate_size."""
    mult = ffn.get("ffn_mult")
    if isinstance(mult, (int, float)) and not isinstance(mult, bool):
        return kv_layout.cdiv(int(2 * mult * hidden / 3), 256) * 256
    size = ffn.get("intermediate_size")
    if isinstance(size, int) and size > 0:
        return size
    raise ModelConfigError(source, "block_configs[%d].ffn" % index, "names neither ffn_mult nor intermediate_size")


def _gemma4(reader, profile):
    """Gemma 4's departures from the plain decoder, as vLLM reads them (gemma4.py, configs/gemma4.py
    gemma4_layer_config, 0.29.0): its full-attention layers take global_head_dim and, with attention_k_eq_v,
    num_global_key_value_heads (profile kv_shapes); the last num_kv_shared_layers layers attend over an earlier
    layer's cache and hold none (layer kind kv_shared), their MLP twice as wide with use_double_wide_mlp; with
    enable_moe_block the experts run beside a dense MLP on every layer; hidden_size_per_layer_input adds a per-layer
    embedding table (vocab_size_per_layer_input rows, per layer) with its projections."""
    cfg, layers = reader.config, profile["num_hidden_layers"]
    shape = {}
    global_head = cfg.get("global_head_dim")
    if isinstance(global_head, int) and global_head > 0 and global_head != profile["head_dim"]:
        shape["head_dim"] = global_head
    global_kv = cfg.get("num_global_key_value_heads")
    if cfg.get("attention_k_eq_v") and isinstance(global_kv, int) and global_kv > 0:
        shape["num_key_value_heads"] = global_kv
    if shape:
        profile["kv_shapes"] = {LAYER_FULL: shape}
    shared = cfg.get("num_kv_shared_layers")
    if isinstance(shared, int) and 0 < shared < layers:
        first = layers - shared
        profile["layer_types"] = [LAYER_KV_SHARED if i >= first and kind in (LAYER_FULL, LAYER_SLIDING) else kind
                                  for i, kind in enumerate(profile["layer_types"])]
        if cfg.get("use_double_wide_mlp"):
            width = profile["intermediate_size"]
            profile["mlp_sizes"] = [2 * width if i >= first else width for i in range(layers)]
    if profile.get("moe") and cfg.get("enable_moe_block"):
        profile["moe"]["parallel_dense_mlp"] = True
    per_layer = cfg.get("hidden_size_per_layer_input")
    if isinstance(per_layer, int) and per_layer > 0:
        vocab = cfg.get("vocab_size_per_layer_input") or profile["vocab_size"]
        # the table, the model's projection to every layer's input and each layer's gate and projection back
        profile["per_layer_input_params"] = layers * per_layer * (vocab + 3 * profile["hidden_size"])


def _mimo_v2(cfg, profile):
    """MiMo-V2-Flash's layers, as vLLM builds them (mimo_v2.py MiMoV2Attention, 0.32): the sliding-window ones take
    swa_num_key_value_heads and swa_head_dim / swa_v_head_dim, the full ones num_key_value_heads and head_dim /
    v_head_dim; V narrower than K (a DiffKV attention backend) in both (profile kv_shapes)."""
    if not cfg.get("swa_head_dim") or not cfg.get("swa_num_key_value_heads"):
        return
    profile["kv_shapes"] = {
        LAYER_SLIDING: {"num_key_value_heads": cfg["swa_num_key_value_heads"], "head_dim": cfg["swa_head_dim"],
                        "v_head_dim": cfg.get("swa_v_head_dim") or cfg["swa_head_dim"]},
        LAYER_FULL: {"num_key_value_heads": profile["num_key_value_heads"], "head_dim": profile["head_dim"],
                     "v_head_dim": cfg.get("v_head_dim") or profile["head_dim"]},
    }


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


def _check_state_dtype(reader, state):
    """The linear-attention state dtype the config names must be a dtype's name (vLLM looks it up by name)."""
    dtype = (state or {}).get("ssm_dtype")
    if dtype is not None and not isinstance(dtype, str):
        field = "mamba_ssm_cache_dtype" if state.get("ssm_dtype_rule") == "nemotron_h" else "mamba_ssm_dtype"
        raise ModelConfigError(reader.source, field, "must be a dtype's name, got %r" % (dtype,))


def _all_positive(values):
    return all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values.values())


def quantization(config, outer_expert_dtype=None):
    """quantization_config -> {method, bits, group_size, weight_type, activation_scheme, ignored_layers, ...} or None
    (unquantized). outer_expert_dtype: the config's expert_dtype (DeepSeek-V4 names it beside, not in, the
    quantization config)."""
    if not isinstance(config, dict) or not config:
        return None
    method = str(config.get("quant_method") or config.get("quantization_method") or "unknown").lower()
    bits = config.get("bits") or config.get("w_bit") or config.get("weight_bits")
    group_size = config.get("group_size") or config.get("q_group_size")
    weight_type = "float" if method in FLOAT4_BLOCK else None
    activation_scheme = config.get("activation_scheme")
    zero_point = None                  # unknown: GPTQ and AWQ files hold qzeros whether or not they are symmetric
    groups = [group for group in (config.get("config_groups") or {}).values()
              if isinstance(group, dict) and isinstance(group.get("weights") or {}, dict)]
    block = config.get("weight_block_size")                     # block-wise fp8 (DeepSeek-V3)
    if groups:                                                   # compressed-tensors: the widest scheme leads
        weights = max((group.get("weights") or {} for group in groups), key=lambda w: _group_bits(w) or 0)
        bits = bits or _group_bits(weights)
        group_size = group_size or weights.get("group_size")
        if weights.get("strategy") == "block":                   # its block-wise fp8 spelling
            block = block or weights.get("block_structure")
        weight_type = weight_type or weights.get("type")
        if weights.get("symmetric") is True:
            zero_point = False         # pack-quantized symmetric weights carry no weight_zero_point
    for group in groups:
        activations = group.get("input_activations")
        if activation_scheme is None and isinstance(activations, dict):
            activation_scheme = "dynamic" if activations.get("dynamic") else "static"
    if config.get("load_in_4bit"):
        bits = 4
    elif config.get("load_in_8bit"):
        bits = 8
    algo = _modelopt_algo(config)
    if algo in MODELOPT_ALGOS:
        algo_bits, algo_type, algo_group = MODELOPT_ALGOS[algo]
        bits, weight_type = bits or algo_bits, weight_type or algo_type
        group_size = group_size or algo_group
    return {
        "method": method,
        "bits": int(bits or QUANT_METHOD_BITS.get(method, 16)),
        "group_size": group_size or (list(block) if block else None),
        "weight_type": weight_type,     # "int" or "float" (4-bit floats carry one 8-bit scale a block)
        "activation_scheme": activation_scheme,     # "static" or "dynamic" activation scales, or None
        "zero_point": zero_point,       # False: the groups have a scale and no zero point
        "experts": _narrower_experts(config.get("expert_dtype") or outer_expert_dtype, groups, bits),
        "ignored_layers": _names(config.get("ignored_layers") or config.get("modules_to_not_convert")
                                 or config.get("ignore") or config.get("exclude_modules")),
        "kv_cache_dtype": _checkpoint_kv_cache_dtype(config, method),
    }


def _group_bits(weights):
    """A compressed-tensors group's weight bits as an integer ("8" and 8 alike), None when it names none."""
    bits = weights.get("num_bits")
    if isinstance(bits, str) and bits.isdigit():
        return int(bits)
    return bits if isinstance(bits, int) and not isinstance(bits, bool) and bits > 0 else None


# Where a checkpoint keeps its MLPs narrower than the rest (quantization "experts"): every MLP (dense, shared and
# routed experts: a compressed-tensors group targeting them), or the routed experts alone (DeepSeek-V4's expert_dtype).
EXPERTS_MLP, EXPERTS_ROUTED = "mlp", "routed"


def _narrower_experts(expert_dtype, groups, bits):
    """{bits, group_size, weight_type, scope} of MLP weights held in fewer bits than the rest: the narrower of a
    compressed-tensors config's groups, unless its targets name the attention (RedHatAI's Hy3-NVFP4-FP8: NVFP4 MLPs
    beside fp8 attention; mixed-precision recipes keep the attention wider), over the routed experts alone where its
    targets name experts and not MLPs; or DeepSeek-V4's FP4 routed experts (e2m1, one ue8m0 scale a 32, beside fp8
    blocks). None when every linear layer takes the same scheme."""
    if str(expert_dtype or "").lower() == "fp4":
        return {"bits": 4, "group_size": 32, "weight_type": "float", "scope": EXPERTS_ROUTED}
    for group in groups:
        weights = group.get("weights") or {}
        targets = " ".join(str(target) for target in group.get("targets") or []).lower()
        narrow = _group_bits(weights)
        if narrow and bits and narrow < int(bits) and "attn" not in targets and "attention" not in targets:
            routed = "expert" in targets and "mlp" not in targets
            return {"bits": narrow, "group_size": weights.get("group_size"), "weight_type": weights.get("type"),
                    "scope": EXPERTS_ROUTED if routed else EXPERTS_MLP}
    return None


def _checkpoint_kv_cache_dtype(config, method):
    """The KV cache dtype a checkpoint asks for, which vLLM takes for --kv-cache-dtype auto
    (engine_memory.checkpoint_kv_cache_dtype): a ModelOpt export's kv_cache_quant_algo FP8 or 8-bit float
    kv_cache_scheme; any kv_cache_scheme of an llm-compressor (compressed-tensors) one, which vLLM runs as fp8
    (attention.py); None otherwise."""
    scheme = config.get("kv_cache_scheme")
    if method == "compressed-tensors":
        return "fp8" if scheme else None
    if not method.startswith("modelopt"):
        return None
    algo = scheme or config.get("kv_cache_quant_algo")
    if isinstance(algo, dict):
        algo = "fp8" if algo.get("num_bits") == 8 and algo.get("type") == "float" else None
    return "fp8" if str(algo or "").lower().startswith("fp8") else None


def _modelopt_algo(config):
    """A ModelOpt export's quant_algo, upper case; for a mixed-precision one the algorithm most of its quantized
    modules use (an MoE's experts, which hold most of the bytes; a tie goes to the wider); None for other
    quantization configs."""
    algo = str(config.get("quant_algo") or "").upper() or None
    layers = config.get("quantized_layers")
    if algo == MODELOPT_MIXED and isinstance(layers, dict):
        counts = {}
        for layer in layers.values():
            name = str(layer.get("quant_algo") or "").upper() if isinstance(layer, dict) else ""
            if name in MODELOPT_ALGOS:
                counts[name] = counts.get(name, 0) + 1
        algo = max(counts, key=lambda name: (counts[name], MODELOPT_ALGOS[name][0])) if counts else None
    return algo


def _names(value):
    """A list of module names from a config value: a lone name is one name, not its letters."""
    if isinstance(value, str):
        return [value]
    return [str(name) for name in value or []]


# --- parameter counts ---------------------------------------------------------------------------

def attention_params(profile, kind=None, layer=None):
    """Parameters of one attention block (q, k, v, o or the MLA projections), of a layer kind with its own KV shape
    (profile kv_shapes: Gemma 4's full layers take global_head_dim for q, k, v and o) where one is given; of decoder
    layer `layer` where the layers differ by more than their kind (DeepSeek-V4's compress ratios)."""
    hidden, heads = profile["hidden_size"], profile["num_attention_heads"]
    mla = profile.get("mla")
    compressed = profile.get("compressed_attention")
    if compressed:                                   # layer's own compress ratio; an MTP layer keeps the window alone
        return compressed_attention_params(compressed, hidden, heads,
                                           compressed["ratios"][layer] if layer is not None else 0)[0]
    if mla:
        qk_head = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        q_lora = mla.get("q_lora_rank")
        q = (hidden * q_lora + q_lora + q_lora * heads * qk_head) if q_lora else hidden * heads * qk_head
        kv_a = hidden * (mla["kv_lora_rank"] + mla["qk_rope_head_dim"]) + mla["kv_lora_rank"]
        kv_b = mla["kv_lora_rank"] * heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"])
        return q + kv_a + kv_b + heads * mla["v_head_dim"] * hidden
    shape = (profile.get("kv_shapes") or {}).get(kind) or {}
    head_dim = shape.get("head_dim") or profile["head_dim"]
    v_head_dim = shape.get("v_head_dim") or head_dim
    kv_heads = shape.get("num_key_value_heads") or profile["num_key_value_heads"]
    gate = hidden * heads * head_dim if profile.get("attention_output_gate") else 0
    return hidden * heads * (head_dim + v_head_dim) + hidden * kv_heads * (head_dim + v_head_dim) + gate


def indexer_params(mla, hidden):
    """(parameters, those vLLM keeps unquantized) of one layer's sparse-attention indexer (vLLM deepseek_v2.py
    Indexer, 0.19: wq_b from the q latent to its heads, wk and the unquantized weights_proj from the hidden state,
    k_norm's weight and bias); none for dense MLA."""
    indexer = mla.get("indexer") or {}
    head, heads = indexer.get("head_dim") or 0, indexer.get("heads") or 0
    unquantized = hidden * heads + 2 * head
    return (mla.get("q_lora_rank") or hidden) * heads * head + hidden * head + unquantized, unquantized


def mla_replicated_params(mla, hidden):
    """One layer's MLA down-projections, which every tensor-parallel rank holds whole (q_a_proj and
    kv_a_proj_with_mqa, fused with disable_tp or ReplicatedLinear; vllm/model_executor/models/deepseek_v2.py,
    0.19.0). The indexer, ReplicatedLinear too, is counted apart (_indexer_params)."""
    q_a = hidden * mla["q_lora_rank"] if mla.get("q_lora_rank") else 0
    return q_a + hidden * (mla["kv_lora_rank"] + mla["qk_rope_head_dim"])


def gated_mlp_params(hidden, intermediate, matrices=3):
    """An MLP's parameters: gate, up and down projections, or up and down alone (matrices 2: a squared-ReLU MLP)."""
    return matrices * hidden * intermediate


def shared_expert_params(profile):
    """The shared experts of one MoE layer (0 for a dense model)."""
    moe = profile.get("moe")
    if not moe:
        return 0
    return moe["num_shared_experts"] * gated_mlp_params(profile["hidden_size"], moe["shared_expert_intermediate_size"],
                                                        mlp_matrices(profile))


def dense_layer_indices(profile):
    """The decoder layers with a dense MLP: the MoE model's first dense layers, or every layer of a dense model
    (Nemotron-H: its MLP-only layers)."""
    mlps = profile.get("mlp_layers")
    if mlps:
        return {i for i, kind in enumerate(mlps) if kind == MLP_DENSE}
    moe = profile.get("moe")
    if moe and not moe.get("parallel_dense_mlp"):
        return set(moe.get("dense_layers") or [])
    return set(range(profile["num_hidden_layers"]))


def mlp_matrices(profile):
    """Weight matrices of one MLP: 2 for an ungated MLP (Nemotron-H's squared ReLU, the UNGATED_MODEL_TYPES
    families), else 3."""
    ungated = profile.get("mlp_activation") in UNGATED_ACTIVATIONS or profile.get("model_type") in UNGATED_MODEL_TYPES
    return 2 if ungated else 3


def moe_layer_count(profile):
    mlps = profile.get("mlp_layers")
    if mlps:
        return mlps.count(MLP_MOE)
    moe = profile.get("moe")
    return profile["num_hidden_layers"] - len(moe.get("dense_layers") or []) if moe else 0


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
    kinds = profile.get("layer_types") or [LAYER_FULL] * profile["num_hidden_layers"]
    if profile.get("compressed_attention"):
        attention = sum(attention_params(profile, layer=index) for index in range(len(kinds)))
    else:
        attention = sum(kinds.count(kind) * attention_params(profile, kind) for kind in ATTENTION_KINDS) \
            + _indexer_params(profile)[0]
    linear_layers = sum(1 for kind in kinds if kind == LAYER_LINEAR)
    return attention + linear_layers * linear_mixer_params(profile), attention


def _replicated_attention_params(profile):
    """(the attention parameters every tensor-parallel rank holds whole, those of them vLLM keeps unquantized):
    MLA's down-projections on every attention layer and the indexer on the layers that keep one, V4's (its
    compressors and indexer weights unquantized)."""
    hidden, heads = profile["hidden_size"], profile["num_attention_heads"]
    compressed, mla = profile.get("compressed_attention"), profile.get("mla")
    if compressed:
        parts = [compressed_attention_params(compressed, hidden, heads, ratio)[1:] for ratio in compressed["ratios"]]
        return sum(whole for whole, _unquantized in parts), sum(unquantized for _whole, unquantized in parts)
    if not mla:
        return 0, 0
    kinds = profile.get("layer_types") or [LAYER_FULL] * profile["num_hidden_layers"]
    indexers, unquantized = _indexer_params(profile)
    down = sum(kinds.count(kind) for kind in ATTENTION_KINDS) * mla_replicated_params(mla, hidden)
    return down + indexers, unquantized


def _indexer_params(profile):
    """(parameters, those vLLM keeps unquantized) of the sparse-attention indexers over the layers that keep one
    (IndexCache: index_topk_freq / index_topk_pattern); (0, 0) for dense MLA and other attention."""
    mla = profile.get("mla") or {}
    indexed = (mla.get("indexer") or {}).get("indexed_layers") or 0
    if not indexed:
        return 0, 0
    params, unquantized = indexer_params(mla, profile["hidden_size"])
    return indexed * params, indexed * unquantized


def expert_width(profile):
    """The width the routed experts take in and give out: a latent MoE's latent, else hidden_size."""
    return (profile.get("moe") or {}).get("latent_size") or profile["hidden_size"]


def moe_layer_params(profile, experts_counted):
    """One MoE MLP: experts_counted routed experts (in a latent MoE at the latent's width, with the two
    projections to and from it) + the shared experts + the router."""
    hidden, width = profile["hidden_size"], expert_width(profile)
    latent_projections = 2 * hidden * width if width != hidden else 0
    return (routed_expert_params(profile, experts_counted) + latent_projections + shared_expert_params(profile)
            + router_params(profile))


def routed_expert_params(profile, experts):
    """experts routed experts of one MoE layer, at the experts' width (expert_width)."""
    return experts * gated_mlp_params(expert_width(profile), profile["moe"]["moe_intermediate_size"],
                                      mlp_matrices(profile))


def router_params(profile):
    """One MoE layer's router: hidden x num_experts."""
    return profile["hidden_size"] * profile["moe"]["num_experts"]


def dense_mlp_params(profile, dense_layers):
    """Every dense MLP: intermediate_size wide on each dense layer, or each layer's own width (DeciLM's mlp_sizes,
    0 where the layer has none)."""
    matrices = mlp_matrices(profile)
    sizes = profile.get("mlp_sizes")
    if sizes:
        return sum(gated_mlp_params(profile["hidden_size"], size, matrices) for size in sizes)
    return len(dense_layers) * gated_mlp_params(profile["hidden_size"], profile["intermediate_size"], matrices)


def count_params(profile):
    """{"total", "active", "mtp", "embedding", "attention", "shared_experts", "dense_mlp", "vision",
    "replicated_attention", "replicated_16bit", "router", "routed_experts"}: absolute counts from the profile alone
    (attention, shared experts and dense MLPs: every decoder layer's, module families some quantizers keep in 16
    bits). vision: the multimodal towers' parameters (profile vision_params, from vision_tower_params and
    audio_tower_params), in the total, not in the active count a token's forward takes."""
    vision = profile.get("vision_params") or 0
    hidden, layers = profile["hidden_size"], profile["num_hidden_layers"]
    embedding = profile["vocab_size"] * hidden * (1 if profile["tie_word_embeddings"] else 2)
    embedding += profile.get("per_layer_input_params") or 0
    mixers, attention = mixer_params(profile)
    moe = profile.get("moe")
    dense_layers = dense_layer_indices(profile)
    moe_layers = moe_layer_count(profile)
    dense_mlp = dense_mlp_params(profile, dense_layers)
    norms = 2 * hidden * layers + hidden
    common = embedding + norms + mixers + dense_mlp
    total = common + vision + (moe_layers * moe_layer_params(profile, moe["num_experts"]) if moe else 0)
    active = common + (moe_layers * moe_layer_params(profile, moe["num_experts_per_tok"]) if moe else 0)
    mtp_mlp = (moe_layer_params(profile, moe["num_experts"]) if moe
               else gated_mlp_params(hidden, profile["intermediate_size"], mlp_matrices(profile)))
    mtp_layer = attention_params(profile) + mtp_mlp + 2 * hidden * hidden + 5 * hidden   # + eh_proj; 2 layer + 3 mtp norms
    replicated = _replicated_attention_params(profile)
    return {"total": total, "active": active, "embedding": embedding, "attention": attention,
            "shared_experts": moe_layers * shared_expert_params(profile), "dense_mlp": dense_mlp,
            "mtp": profile.get("num_nextn_predict_layers", 0) * mtp_layer, "vision": vision,
            # within the total, held whole on every tensor-parallel rank: MLA's down-projections and indexer on
            # its attention layers, and the routers (GateLinear / ReplicatedLinear in vLLM's MoE models)
            "replicated_attention": replicated[0] - replicated[1], "replicated_16bit": replicated[1],
            "router": moe_layers * router_params(profile) if moe else 0,
            "routed_experts": moe_layers * routed_expert_params(profile, moe["num_experts"]) if moe else 0}
