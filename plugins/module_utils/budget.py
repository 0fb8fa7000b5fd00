# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Per-host memory budget for a vLLM deployment: pure arithmetic, no I/O.

Per GPU (per tensor-parallel rank), the way vLLM's V1 engine accounts:
  * it asks for ``ceil(gpu_memory_utilization x TOTAL)`` bytes and refuses to start when FREE memory
    is below that, so the utilization is lowered to what is free (rounded down to 0.01);
  * KV bytes = that request - weights per rank - the engine's own overhead (engine_memory: the
    profile run's activation peak, non-torch memory, the CUDA-graph estimate where counted), or
    exactly ``kv_cache_memory_bytes`` when the engine is told so (VLLM_CPU_KVCACHE_SPACE on CPU);
  * the KV bytes become blocks, tokens and concurrency by layer group (kv_layout).
Two verdicts: "starts" (one max_model_len request fits: the check vLLM makes at start) and
"meets the target" (max_num_seqs requests of max_model_len fit), which drives the retreat:
(1) a lower quantization tier with weight files, (2) max_model_len, (3) max_num_seqs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.hy3.fleet.plugins.module_utils import calibration, engine_memory, kv_layout
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import EXPERTS_MLP, FLOAT4_BLOCK, dense_layer_indices

GIB = 1024 ** 3

# Bits per weight of each quantization tier, highest first.
TIER_BITS = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}

# vLLM --quantization value to pass for each tier when the user gives none
# (None: vLLM reads quant_method from the checkpoint's config.json).
TIER_DEFAULT_QUANTIZATION = {"bf16": None, "fp16": None, "fp8": "fp8", "int8": None, "int4": None}

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": 2}
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
PLATFORMS = ("cuda", "cpu")

# Machine status beside every verdict sentence.
FITS, RETREATED, CANNOT_HOLD = "fits", "retreated", "cannot_hold"
# Where the overhead between weights and KV cache came from.
OVERHEAD_MODEL, OVERHEAD_CALIBRATED, OVERHEAD_OVERRIDE, OVERHEAD_EXPLICIT_KV = (
    "model", "calibrated", "override", "explicit_kv")

# How far a start verdict can be trusted, as (fraction of the KV cache, floor): bench/kv_accuracy.py predicts 90% of
# its public starts within 5% or 0.5 GiB of the engine's KV cache; a calibrated overhead is within 1% of the engine's
# own tokens (the calibration's target); an explicit kv_cache_memory_bytes is the cache the engine sizes. A start
# whose KV cache is nearer than this to one max_model_len request is "tight": vLLM's own check may go either way.
PREDICTION_ERROR = {OVERHEAD_MODEL: (0.05, 0.5 * GIB), OVERHEAD_OVERRIDE: (0.05, 0.5 * GIB),
                    OVERHEAD_CALIBRATED: (0.01, 0), OVERHEAD_EXPLICIT_KV: (0, 0)}
CLEAR, TIGHT = "clear", "tight"

PROFILE_FIELDS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings")


class BudgetInputError(ValueError):
    """Input that cannot describe a real deployment; the message says which."""


def gib(nbytes):
    return round(nbytes / GIB, 2)


def _require(cond, message):
    if not cond:
        raise BudgetInputError(message)


def validate_profile(profile):
    for key in PROFILE_FIELDS:
        value = profile.get(key)
        _require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                 "model profile: %s must be a positive integer, got %r" % (key, value))
    params = profile.get("params") or {}
    for key in ("total", "active", "mtp", "embedding"):
        _require((params.get(key) or 0) >= 0, "model profile: params.%s must not be negative, got %r"
                 % (key, params.get(key)))
    _require((params.get("total") or 0) > 0, "model profile: params.total must be positive, got %r"
             % params.get("total"))
    _require((params.get("active") or 0) <= params["total"],
             "model profile: params.active (%s) cannot exceed params.total (%s)" % (params.get("active"), params["total"]))


def effective_bits(bits, quantization):
    """Bits a quantized weight really takes: the value plus its group scale and zero point when
    weights are quantized in groups (GPTQ/AWQ int4: 4 + 16/128 + 4/128; symmetric compressed-tensors groups have
    no zero point: 4 + 16/32 for Kimi-K2's experts), or its one 8-bit scale per block when they are 4-bit floats
    (MXFP4: 4 + 8/32; NVFP4: 4 + 8/16)."""
    quantization = quantization or {}
    group = quantization.get("group_size") or 0
    if bits < 8 and quantization.get("bits") == bits and quantization.get("weight_type") == "float":
        block = group if isinstance(group, int) and group > 0 else FLOAT4_BLOCK.get(quantization.get("method"), 32)
        return bits + 8.0 / block
    if bits < 8 and isinstance(group, int) and group > 0:
        zero_point = 0 if quantization.get("zero_point") is False else bits
        return bits + (16.0 + zero_point) / group
    return float(bits)


# The module families a quantization config's ignore list can keep in 16 bits, by the module a name ends at:
# compressed-tensors' "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"
# (Kimi-K2.x: only the routed experts are int4), gpt-oss's "model.layers.*.self_attn" (only the experts are MXFP4),
# or per-layer module names ("model.layers.0.self_attn.q_proj": layer 0's attention). A router gate
# ("mlp.gate", "mlp.shared_expert_gate"), one projection named by a pattern, and a vision tower's modules keep
# nothing counted.
FAMILY_MODULES = (("attention", ("self_attn", "attn", "attention", "self_attention")),
                  ("shared_experts", ("shared_experts", "shared_expert")),
                  ("dense_mlp", ("mlp",)))
NON_LANGUAGE = ("vision", "visual", "mm_projector", "multi_modal", "audio")
LAYER_INDEX = re.compile(r"layers\.(\d+)\.")


def _family_of(module):
    return next((family for family, modules in FAMILY_MODULES if module in modules), None)


def _named_family(name):
    """(family, pattern) a lower-case ignore-list name keeps, or (None, pattern)."""
    pattern = name.startswith("re:") or "*" in name or not LAYER_INDEX.search(name)
    if any(word in name for word in NON_LANGUAGE):
        return None, pattern
    parts = [part.strip("*$^") for part in name[3 if name.startswith("re:") else 0:].replace("\\.", ".").split(".")]
    parts = [part for part in parts if part]
    if not parts:
        return None, pattern
    family = _family_of(parts[-1])
    if family is None and len(parts) > 1 and "proj" in parts[-1]:
        # projections of a module: the whole module when a pattern names several ("(gate|up|down)_proj"), the
        # layer's module when a per-layer name names one of them
        several = "|" in parts[-1]
        family = _family_of(parts[-2]) if (several or not pattern) else None
    return family, pattern


def _family_layers(profile, family):
    """The decoder layers that hold a family's modules."""
    layers = range(profile["num_hidden_layers"])
    dense = dense_layer_indices(profile)
    if family == "shared_experts":
        return [i for i in layers if i not in dense]
    return [i for i in layers if i in dense] if family == "dense_mlp" else list(layers)


def _kept_shares(profile, ignored, stage_layers=None):
    """{family: the share of its parameters the ignore list keeps}, over the whole model or the decoder layers
    stage_layers hold: all of the family's layers when a pattern or a bare module name names it, else the
    layers its per-layer names carry."""
    patterns, indices = set(), {}
    for name in ignored:
        family, pattern = _named_family(name)
        if family and pattern:
            patterns.add(family)
        elif family:
            indices.setdefault(family, set()).add(int(LAYER_INDEX.search(name).group(1)))
    shares = {}
    for family, _modules in FAMILY_MODULES:
        layers = _family_layers(profile, family)
        kept = set(layers) if family in patterns else indices.get(family, set()) & set(layers)
        if stage_layers is not None:
            kept &= set(stage_layers)
        if layers and kept:
            shares[family] = len(kept) / float(len(layers))
    return shares


def _ignored_names(profile):
    """The quantization config's ignore list, lower case."""
    return [name.lower() for name in (profile.get("quantization") or {}).get("ignored_layers") or []]


def kept_16bit_params(profile, bits, stage_layers=None):
    """Parameters a quantized checkpoint keeps in 16 bits besides the embeddings, in the whole model or the
    decoder layers stage_layers hold: the share of each module family (FAMILY_MODULES) its quantization
    config's ignore list keeps (none for an unquantized tier)."""
    ignored = _ignored_names(profile)
    if bits >= 16 or not ignored:
        return 0
    params = profile["params"]
    shares = _kept_shares(profile, ignored, stage_layers)
    # the attention's parts vLLM never quantizes are counted once, with the routers (_unquantized_params)
    family_params = dict(params, attention=(params.get("attention") or 0) - (params.get("replicated_16bit") or 0))
    return int(sum((family_params.get(family) or 0) * share for family, share in shares.items()))


def unquantized_bytes(bits):
    """Bytes a parameter a quantizer left out takes: the served dtype's, 4 where the tier is float32 (a quantized
    or 16-bit tier serves them in 16 bits)."""
    return 4 if bits >= 32 else 2


def _unquantized_params(params):
    """What every quantized checkpoint keeps in 16 bits: the embeddings (and an untied LM head), the vision
    tower, which quantizers leave out, and the MoE routers and the attention parts vLLM builds without a
    quantization method (replicated_16bit: V4's compressors, the indexers' weights_proj)."""
    return sum(params.get(part) or 0 for part in ("embedding", "vision", "router", "replicated_16bit"))


def narrower_params(profile, share=1.0):
    """The parameters (of the share of the decoder layers a stage holds) a checkpoint keeps narrower than the rest
    (quantization experts): the routed experts, and with scope mlp the dense MLPs and shared experts its ignore list
    does not keep in 16 bits."""
    experts = (profile.get("quantization") or {}).get("experts")
    if not experts:
        return 0
    params = profile["params"]
    narrow = params.get("routed_experts") or 0
    if experts["scope"] == EXPERTS_MLP:
        kept = _kept_shares(profile, _ignored_names(profile))
        narrow += sum((params.get(family) or 0) * (1 - kept.get(family, 0)) for family in ("shared_experts", "dense_mlp"))
    return narrow * share


def quantized_bytes(profile, bits, count, narrow):
    """Bytes of count quantized parameters, narrow of them (narrower_params) in the checkpoint's narrower MLP scheme
    (DeepSeek-V4's FP4 experts 4 + 8/32 bits, NVFP4 MLPs 4 + 8/16, beside fp8), the rest at the tier's."""
    quantization = profile.get("quantization") or {}
    experts = quantization.get("experts")
    if not experts or bits != quantization.get("bits") or experts["bits"] >= bits:    # another tier: one scheme
        return count * effective_bits(bits, quantization) / 8
    narrow = min(narrow, count)
    return ((count - narrow) * effective_bits(bits, quantization)
            + narrow * effective_bits(experts["bits"], experts)) / 8


def tp_replicated_excess_bytes(profile, bits, tp):
    """What the modules vLLM holds whole on every tensor-parallel rank (profile params replicated_attention: MLA's
    down-projections and indexer; router) add to one rank beyond its 1/tp share: the attention's at the tier's
    bytes, or 16 bits where the quantizer kept the attention (Kimi-K2's experts-only int4), the routers at 16."""
    params = profile["params"]
    if tp <= 1:
        return 0
    kept = _kept_shares(profile, _ignored_names(profile)).get("attention", 0) if bits < 16 else 0
    quantized = effective_bits(bits, profile.get("quantization")) / 8 if bits < 16 else unquantized_bytes(bits)
    attention_bytes = kept * unquantized_bytes(bits) + (1 - kept) * quantized
    whole = (params.get("replicated_attention") or 0) * attention_bytes \
        + ((params.get("router") or 0) + (params.get("replicated_16bit") or 0)) * unquantized_bytes(bits)
    return int(whole - whole / tp)


def replicated_vision_bytes(profile, tp, bits):
    """What a tower every tensor-parallel rank holds whole (profile vision_replicated: Gemma 4's) adds to a rank
    beyond its 1/tp share, at unquantized_bytes."""
    vision = (profile["params"].get("vision") or 0) if profile.get("vision_replicated") else 0
    tower = vision * unquantized_bytes(bits)
    return int(tower - tower // tp)


def nominal_weight_bytes_per_rank(profile, bits, tp, load_mtp):
    """The floor of one rank's weights from the parameter counts: every expert is resident, the
    embeddings and lm_head, the routers, a vision tower and the modules a quantizer left out (kept_16bit_params)
    stay 16 bit, everything split by tp but what vLLM replicates (replicated_vision_bytes,
    tp_replicated_excess_bytes)."""
    total, kept = _whole_model_params(profile, bits, load_mtp)
    quantized = quantized_bytes(profile, bits, total - kept, narrower_params(profile))
    return int((quantized + kept * unquantized_bytes(bits)) // tp) + replicated_vision_bytes(profile, tp, bits) \
        + tp_replicated_excess_bytes(profile, bits, tp)


def _whole_model_params(profile, bits, load_mtp):
    """(the parameters one copy of the model loads, those of them kept in 16 bits)."""
    params = profile["params"]
    total = params["total"] + (params.get("mtp") or 0 if load_mtp else 0)
    return total, min(_unquantized_params(params) + kept_16bit_params(profile, bits), total)


def _stage_kept_params(profile, bits, share):
    return kept_16bit_params(profile, bits, range(share["first_layer"], share["first_layer"] + share["layers"])) \
        + share.get("routers", 0)


def quantized_params_per_rank(profile, bits, tp, load_mtp, share=None):
    """The parameters one rank holds at the tier's bits (of one pipeline stage where share is given): what
    nominal_weight_bytes_per_rank and stage_weight_bytes quantize, split by tp."""
    if share:
        return (share["params"] - _stage_kept_params(profile, bits, share)) // tp
    total, kept = _whole_model_params(profile, bits, load_mtp)
    return (total - kept) // tp


def pp_partition(num_layers, pp):
    """Decoder layers per pipeline stage, as vLLM splits them (vllm/distributed/utils.py get_pp_indices,
    without VLLM_PP_LAYER_PARTITION): an equal share each, the remainder one by one to the stages before
    the last, which also holds the LM head."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def stage_shares(profile, pp, load_mtp):
    """Per pipeline stage: its layer slice and the share of the model's parameters it holds.

    The embedding is on the first stage; the LM head (the embedding again when tied: vLLM's last rank builds
    it) and an MTP layer on the last; a vision tower and Gemma 4's per-layer input embeddings on every stage
    (vLLM's Qwen-VL and Gemma 4 classes build them whatever the rank); decoder layers as pp_partition splits
    them."""
    params = profile["params"]
    layers = profile["num_hidden_layers"]
    vocab_matrix = profile["vocab_size"] * profile["hidden_size"]
    every_stage = (params.get("vision") or 0) + (profile.get("per_layer_input_params") or 0)
    per_layer = (params["total"] - params["embedding"] - (params.get("vision") or 0)) / float(layers)
    routers_per_layer = (params.get("router") or 0) / float(layers)     # within per_layer, kept 16-bit
    mtp = (params.get("mtp") or 0) if load_mtp else 0
    types = profile.get("layer_types") or [kv_layout.FULL] * layers
    shares, start = [], 0
    for stage, count in enumerate(pp_partition(layers, pp)):
        last = stage == pp - 1
        shares.append({"stage": stage, "layers": count, "first_layer": start,
                       "layer_types": list(types[start:start + count]), "last": last,
                       "params": count * per_layer + (mtp if last else 0),
                       "routers": count * routers_per_layer,
                       "params_16bit": every_stage + (vocab_matrix if stage == 0 else 0) + (vocab_matrix if last else 0)})
        start += count
    return shares


def stage_compressed_attention(profile, share):
    """DeepSeek-V4's compressed attention over the decoder layers a pipeline stage holds (None for other models)."""
    compressed = profile.get("compressed_attention")
    if not compressed:
        return None
    return dict(compressed, ratios=compressed["ratios"][share["first_layer"]:share["first_layer"] + share["layers"]])


def stage_weight_bytes(profile, bits, tp, share, load_mtp):
    """(nominal bytes of one rank of this stage, its fraction of the whole model's nominal bytes): the
    quantized layers at the tier's bits, embedding, LM head, routers and a vision tower at 16 bits, as
    nominal_weight_bytes_per_rank."""
    kept = _stage_kept_params(profile, bits, share)
    layers_share = share["layers"] / float(profile["num_hidden_layers"])
    stage = (quantized_bytes(profile, bits, share["params"] - kept, narrower_params(profile, layers_share))
             + (kept + share["params_16bit"]) * unquantized_bytes(bits))
    whole = nominal_weight_bytes_per_rank(profile, bits, 1, load_mtp)
    return (int(stage // tp) + replicated_vision_bytes(profile, tp, bits)
            + int(tp_replicated_excess_bytes(profile, bits, tp) * layers_share), stage / float(whole))


def check_pipeline_parallel(profile, pp, tp, gpu_count):
    _require(pp >= 1, "pipeline_parallel_size must be at least 1, got %s" % pp)
    _require(pp <= profile["num_hidden_layers"],
             "pipeline_parallel_size %d is more than the model's %d layers" % (pp, profile["num_hidden_layers"]))
    _require(pp == 1 or tp * pp <= gpu_count, "tensor_parallel_size %d x pipeline_parallel_size %d needs %d GPUs, the group has %d"
             % (tp, pp, tp * pp, gpu_count))


def check_tensor_parallel(profile, tp, gpu_count):
    _require(gpu_count > 0, "no GPUs in the facts: nothing to budget")
    _require(tp >= 1, "tensor_parallel_size must be at least 1, got %s" % tp)
    _require(tp <= gpu_count, "tensor_parallel_size %d is more than the %d GPU(s) on this host" % (tp, gpu_count))
    kv_heads = profile["num_key_value_heads"]
    if not profile.get("mla"):
        _require(kv_heads % tp == 0 or tp % kv_heads == 0,
                 "tensor_parallel_size %d does not divide the %d KV heads (nor is it a multiple of them); "
                 "pick a divisor of %d" % (tp, kv_heads, kv_heads))
    heads = profile["num_attention_heads"]
    _require(heads % tp == 0, "tensor_parallel_size %d does not divide the %d attention heads" % (tp, heads))


def effective_utilization(gpus, desired):
    """Highest utilization <= desired that every GPU can satisfy from its FREE memory.

    vLLM requests ceil(total x utilization) bytes and refuses to start when free
    memory is smaller.  Returns (utilization, reason or None).
    """
    util = desired
    tightest = None
    for gpu in gpus:
        fit = math.floor(gpu["free"] / gpu["total"] * 100) / 100
        while fit > 0 and math.ceil(gpu["total"] * fit) > gpu["free"]:
            fit = round(fit - 0.01, 2)
        if fit < util:
            util, tightest = fit, gpu
    if tightest is None:
        return util, None
    return util, ("GPU %s has %.2f of %.2f GiB free; vLLM refuses to start when free memory is below "
                  "gpu_memory_utilization x total, so utilization is lowered from %.2f to %.2f"
                  % (tightest.get("index", "?"), tightest["free"] / GIB, tightest["total"] / GIB, desired, util))


def _room_after_kv(ctx, state, table, util, reason, gpus):
    """(utilization, note, table): where the engine's KV cache would fit but its uncounted CUDA graphs and warm-up
    would not fit outside the request after it (after_kv), the highest utilization in hundredths that leaves them
    room on every GPU, and the table re-evaluated there; unchanged otherwise (the retreat then goes on from it)."""
    if table["starts"] or not table.get("kv_starts", True) or not table.get("after_kv"):
        return util, reason, table
    startup = engine_memory.startup_bytes(ctx["tp"], ctx["engine"])
    lowered = min(math.floor((g["free"] - startup - table["after_kv"]) / float(g["total"]) * 100) / 100
                  for g in gpus)
    if lowered <= 0 or lowered >= util:
        return util, reason, table
    ctx["engine_bytes"] = min(int(math.ceil(g["total"] * lowered)) for g in gpus)
    need = table["after_kv"] / GIB
    note = ("the engine captures its CUDA graphs and warms its sampler up after the KV cache, which needs %.2f GiB "
            "outside the requested memory: utilization lowered from %.2f to %.2f" % (need, util, lowered))
    return lowered, "; ".join(part for part in (reason, note) if part), evaluate(state, ctx)


def utilization_bounds(gpus, engine):
    """The GPUs as the utilization must fit them: an engine that measures device-wide counts the other processes'
    memory inside its own requested budget (and starts whatever is free: the free-memory check came with 0.9.1), so
    for it that memory is not taken twice."""
    if not engine_memory.measured_device_wide(engine):
        return gpus
    return [dict(g, free=min(g["total"], g["free"] + int(g.get("other_processes") or 0))) for g in gpus]


def calibration_fields(ctx, state):
    """The calibration key of one setting: what fixes the engine's overhead."""
    engine = ctx["engine"]
    settings = state_settings(engine, state, ctx["profile"])
    return {
        "gpu_name": engine.get("gpu_name"), "engine_version": engine.get("version"),
        "model": engine.get("model_id") or ctx["profile"].get("architecture"),
        "quantization": state["tier"]["name"], "tensor_parallel_size": ctx["tp"],
        "max_num_batched_tokens": settings["max_num_batched_tokens"], "max_num_seqs": state["max_num_seqs"],
        "enforce_eager": bool(engine.get("enforce_eager")), "kv_cache_dtype": ctx["kv_cache_dtype"],
        "dtype": state["tier"].get("dtype") or "bfloat16",
        "engine_config": engine_memory.overhead_config_key(settings, ctx["profile"]),
    }


def overhead_lines(ctx, state, last_stage=True, first_stage=None):
    """The per-rank terms between the weights and the KV cache, where they came from, and the
    calibration entry used (or None). last_stage False: a pipeline stage before the last, which
    runs no sampler in the profile run; first_stage False: a stage after the first, without the embedding table
    (default: the whole engine's, pp 1)."""
    engine = ctx["engine"]
    if engine.get("kv_cache_memory_bytes"):
        return {"total": 0}, OVERHEAD_EXPLICIT_KV, None
    # What other processes hold, where the engine counts it, is this host's on every path: a calibrated overhead is
    # recorded net of the measuring host's, and a flat one is the engine's own.
    others = engine_memory.other_processes_bytes(engine)
    # A pipeline stage's overhead is not a whole engine's: the store's entries (keyed without the stages)
    # never calibrate a node group.
    entry = calibration.lookup(engine.get("calibration_entries"), calibration_fields(ctx, state)) if ctx["pp"] == 1 else None
    # Activations in the model's dtype: an fp32 model holds twice the bytes (and fp32 logits from the start).
    act_bytes = tier_dtype_bytes(state["tier"])
    settings = state_settings(engine, state, ctx["profile"], last_pp_stage=last_stage, act_bytes=act_bytes,
                              first_pp_stage=ctx["pp"] == 1 if first_stage is None else first_stage,
                              kv_dtype_bytes=kv_cache_dtype_bytes(ctx, state["tier"]))
    if not entry and engine.get("runtime_overhead_gib") is None:
        return engine_memory.overhead(ctx["profile"], ctx["tp"], settings), OVERHEAD_MODEL, None
    # what the engine needs outside the request after the KV cache is the model's on every path: a calibrated or flat
    # overhead measures (or sets) what lies inside it; the model runs only for an engine that captures uncounted graphs
    after_kv = (engine_memory.overhead(ctx["profile"], ctx["tp"], settings)["after_kv"]
                if engine_memory.captures_after_kv(ctx["profile"], settings) else 0)
    if entry:
        return ({"calibrated": entry["overhead_bytes"], "other_processes": others,
                 "total": entry["overhead_bytes"] + others, "after_kv": after_kv}, OVERHEAD_CALIBRATED, entry)
    flat = int(engine["runtime_overhead_gib"] * GIB)
    return ({"runtime_overhead": flat, "other_processes": others, "total": flat + others,
             "after_kv": after_kv}, OVERHEAD_OVERRIDE, None)


def tier_dtype_bytes(tier):
    """Bytes an element of the tier's activations (its model dtype)."""
    return DTYPE_BYTES.get(tier.get("dtype") or "bfloat16", 2)


def kv_cache_dtype_bytes(ctx, tier):
    """Bytes an element of the KV cache: its fp8 dtype's, else (auto) the model dtype's."""
    return KV_DTYPE_BYTES.get(ctx["kv_cache_dtype"], tier_dtype_bytes(tier))


def state_settings(engine, state, profile=None, **extra):
    """The engine's settings at one retreat state: its max_num_seqs and max_model_len over the engine's own, and
    (profile given) the batch a V0 engine sizes by itself for that max_model_len: a retreat across 32K turns its own
    chunked prefill off (engine_memory.v0_batched_tokens)."""
    settings = dict(engine, max_num_seqs=state["max_num_seqs"], max_model_len=state["max_model_len"], **extra)
    if profile is not None and engine.get("v0_engine") and engine.get("max_num_batched_tokens_source") == "engine default":
        settings["max_num_batched_tokens"] = engine_memory.v0_batched_tokens(engine.get("version"),
                                                                             state["max_model_len"], profile, engine)
    return settings


def evaluate(state, ctx):
    """Budget table for one (tier, max_model_len, max_num_seqs) state, all in bytes. Under pipeline
    parallelism, the table of the tightest stage (vLLM sizes every stage's cache to the smallest:
    vllm/v1/core/kv_cache_utils.py get_kv_cache_configs gives every worker the smallest num_blocks),
    with each stage's own weights, layers and profile run (the sampler runs on the last stage only),
    and ``stages``: per stage its layers, weights, overhead, KV bytes and blocks."""
    if ctx.get("pp", 1) == 1:
        return evaluate_stage(state, ctx, None, overhead_lines(ctx, state))
    last = overhead_lines(ctx, state, first_stage=False)
    modelled = last[1] == OVERHEAD_MODEL
    first = overhead_lines(ctx, state, last_stage=False, first_stage=True) if modelled else last
    middle = overhead_lines(ctx, state, last_stage=False, first_stage=False) if modelled and ctx["pp"] > 2 else first
    shares = stage_shares(ctx["profile"], ctx["pp"], ctx["load_mtp"])
    tables = [evaluate_stage(state, ctx, share, last if share["last"] else first if share["stage"] == 0 else middle)
              for share in shares]
    # a stage whose layers hold no KV cache bounds no block count, only whether it holds its weights
    caching = [table for table in tables if table["kv_cache_blocks"] is not None] or tables
    tightest = min(caching, key=lambda table: (table["kv_cache_blocks"] or 0, table["headroom"]))
    nearest = min(tables, key=lambda table: table["start_margin"])
    stages = [{"stage": share["stage"], "layers": share["layers"], "weights": t["weights"], "overhead": t["overhead"],
               "kv_available": t["kv_available"], "kv_cache_blocks": t["kv_cache_blocks"]}
              for share, t in zip(shares, tables)]
    return dict(tightest, kv_cache_tokens=tightest["kv_cache_tokens"] and min(t["kv_cache_tokens"] for t in caching),
                max_concurrency=tightest["max_concurrency"] and min(t["max_concurrency"] for t in caching),
                starts=all(t["starts"] for t in tables), kv_starts=all(t["kv_starts"] for t in tables),
                start_margin=nearest["start_margin"], start_error=nearest["start_error"],
                after_kv=max(t["after_kv"] for t in tables), room_after_kv=min(t["room_after_kv"] for t in tables),
                headroom=min(t["headroom"] for t in tables), stages=stages)


def kv_policies(ctx, model_dtype_bytes, kv_dtype_bytes):
    """(state_policy, mla_policy) of kv_layout.layout for this plan: the whole model's and the engine's, the same for
    every state the retreat weighs and every pipeline stage, so worked out once per pair of dtypes."""
    key = (model_dtype_bytes, kv_dtype_bytes)
    cache = ctx.setdefault("kv_policies", {})
    if key not in cache:
        cache[key] = (engine_memory.linear_state_policy(ctx["profile"], ctx["engine"], model_dtype_bytes),
                      engine_memory.sparse_mla_policy(ctx["engine"], kv_dtype_bytes))
    return cache[key]


def evaluate_stage(state, ctx, share, overhead):
    """The table of one rank: of the whole model (share None) or of one pipeline stage; overhead is
    overhead_lines()' result for this state."""
    tier, tp, engine = state["tier"], ctx["tp"], ctx["engine"]
    profile = ctx["profile"]
    measured = tier.get("weight_bytes_per_rank")
    if measured is None and tier.get("measured_bytes"):
        measured = tier["measured_bytes"] // tp
    if share:
        nominal, fraction = stage_weight_bytes(profile, tier["bits"], tp, share, ctx["load_mtp"])
        per_stage = tier.get("weight_bytes_per_stage")     # one rank of each stage, as loaded
        if per_stage and len(per_stage) == ctx["pp"] and per_stage[share["stage"]]:
            measured = int(per_stage[share["stage"]])
        else:
            measured = int(measured * fraction) if measured else measured
        profile = dict(profile, num_hidden_layers=share["layers"], layer_types=share["layer_types"],
                       model_layer_types=profile.get("layer_types"),
                       compressed_attention=stage_compressed_attention(profile, share))
    else:
        nominal = nominal_weight_bytes_per_rank(profile, tier["bits"], tp, ctx["load_mtp"])
    model_dtype_bytes = tier_dtype_bytes(tier)
    kv_dtype_bytes = kv_cache_dtype_bytes(ctx, tier)
    # Header-measured bytes are exact; the parameter arithmetic is the floor when there are none. Either is
    # the checkpoint's size; what loading adds to it (not when the bytes are the engine's own "Model loading took"
    # figure, tier weights_as_loaded): MXFP4 experts grow when their kernel pads them, Hopper's sparse-MLA
    # backend reserves its prefill workspace while the model is built, and the rope tables are built then.
    padding = 0
    if not tier.get("weights_as_loaded"):
        loading = state_settings(engine, state, kv_dtype_bytes=kv_dtype_bytes)
        padding = (engine_memory.expert_padding_bytes(profile, tp, engine,
                                                      effective_bits(tier["bits"], profile.get("quantization")))
                   + engine_memory.sparse_mla_load_workspace_bytes(profile, tp, loading)
                   + engine_memory.rope_table_bytes(profile, model_dtype_bytes)
                   + engine_memory.marlin_fp8_scale_bytes(
                       profile, engine, tier["bits"],
                       quantized_params_per_rank(ctx["profile"], tier["bits"], tp, ctx["load_mtp"], share),
                       model_dtype_bytes))
    weights = (measured if measured else nominal) + padding
    lines, source, entry = overhead
    available = int(engine["kv_cache_memory_bytes"]) if source == OVERHEAD_EXPLICIT_KV else ctx["engine_bytes"] - weights - lines["total"]
    # The extensible KV cache (v0.34) also keeps a margin of the memory free at start (calibrated overheads are
    # recorded net of it; a calibrated or flat overhead has no modelled peak, so the margin's floor applies).
    margin = 0 if source == OVERHEAD_EXPLICIT_KV else engine_memory.extensible_margin_bytes(
        engine, tp, ctx["free_min"] - ctx["engine_bytes"], lines.get("activation_peak"))
    available -= margin
    draft_layers = engine_memory.draft_kv_layers(profile, engine, ctx["load_mtp"]) if not share or share["last"] else 0
    state_policy, mla_policy = kv_policies(ctx, model_dtype_bytes, kv_dtype_bytes)
    layout = kv_layout.layout(profile, tp, kv_dtype_bytes, ctx["block_size"], state["max_model_len"],
                              engine_memory.in_flight_tokens(profile, engine, ctx["pp"]), draft_layers,
                              state_policy, mla_policy, engine_memory.attention_start_blocks(engine))
    cap = kv_layout.capacity(layout, available, engine.get("tokens_from_concurrency", True))
    one_request = kv_layout.startup_check_bytes(layout)
    needed = kv_layout.bytes_for_requests(layout, state["max_num_seqs"])
    # what is left outside the request once the engine runs: its graphs and warm-up, where not counted, land there
    after_kv = lines.get("after_kv") or 0
    room_after_kv = ctx["free_min"] - ctx["engine_bytes"] - engine_memory.startup_bytes(tp, engine)
    # vLLM keeps one block back (the null block) before checking that one request fits.
    start_margin = available - layout["bytes_per_block"] - one_request
    fraction, floor = PREDICTION_ERROR[source]
    return {
        "free": ctx["free_min"],
        "engine_request": ctx["engine_bytes"],
        "weights_nominal": nominal,
        "weights_measured": measured,
        "weights_padding": padding,
        "weights": weights,
        "activation_peak": lines.get("activation_peak"),
        "sampler_state": lines.get("sampler_state"),
        "moe_workspace": lines.get("moe_workspace"),
        "attention_workspace": lines.get("attention_workspace"),
        "cold_compile": lines.get("cold_compile"),
        "speculative": lines.get("speculative"),
        "encoder_profile": lines.get("encoder_profile"),
        "non_torch": lines.get("non_torch"),
        "cudagraph": lines.get("cudagraph"),
        "other_processes": lines.get("other_processes"),
        "warmup_margin": margin,
        "overhead": lines["total"],
        "overhead_source": source,
        "calibrated_by": {k: entry.get(k) for k in ("host", "measured_at")} if entry else None,
        "kv_available": available,
        "kv_one_request": one_request,
        "kv_needed": needed,
        "headroom": available - needed,
        "after_kv": after_kv,
        "room_after_kv": room_after_kv,
        "kv_bytes_per_token": int(round(kv_layout.bytes_per_token(layout))),
        "kv_block_size": layout["block_size"],        # a hybrid engine's attention block, grown to hold one state
        "kv_cache_tokens": cap["tokens"],
        "kv_cache_blocks": cap["num_blocks"],
        "max_concurrency": cap["max_concurrency"],
        "start_margin": start_margin,
        "start_error": int(max(fraction * abs(available), floor)),
        "kv_starts": start_margin >= 0,
        "starts": start_margin >= 0 and (not after_kv or after_kv <= room_after_kv),
    }


# Keys of a budget table that are counts or labels, not byte amounts.
NOT_BYTES = ("kv_bytes_per_token", "kv_block_size", "kv_cache_tokens", "kv_cache_blocks", "max_concurrency", "starts",
             "kv_starts", "overhead_source", "calibrated_by")


def _fits(table):
    return table["starts"] and table["headroom"] >= 0


STAGE_BYTES = ("weights", "overhead", "kv_available")


def table_in_gib(table):
    out = {}
    for key, value in table.items():
        if key == "stages":
            out[key] = [dict(stage, **{k: gib(stage[k]) for k in STAGE_BYTES}) for stage in value]
        elif key in NOT_BYTES:
            out[key] = value
        else:
            out[key] = gib(value) if value is not None else None
    return out


def _step(action, state, table):
    return {
        "action": action,
        "quantization": state["tier"]["name"],
        "max_model_len": state["max_model_len"],
        "max_num_seqs": state["max_num_seqs"],
        "fits": _fits(table),
        "starts": table["starts"],
        "table_gib": table_in_gib(table),
    }


def _largest_fitting(low, high, fits):
    """Largest value in [low, high] for which fits(value) holds (fits is monotone), else None."""
    if low > high or not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def validate_request(profile, tiers, gpus, gpu_memory_utilization, kv_cache_dtype, block_size,
                     max_model_len_multiple, engine):
    validate_profile(profile)
    _require(0 < gpu_memory_utilization <= 1,
             "gpu_memory_utilization must be in (0, 1], got %s" % gpu_memory_utilization)
    overhead = engine.get("runtime_overhead_gib")
    _require(overhead is None or overhead >= 0, "runtime_overhead_gib must not be negative, got %s" % overhead)
    _require(engine.get("platform", "cuda") in PLATFORMS,
             "unknown engine platform %r; use %s" % (engine.get("platform"), " or ".join(PLATFORMS)))
    _require(engine.get("platform", "cuda") != "cpu" or engine.get("kv_cache_memory_bytes"),
             "the CPU engine sizes its KV cache from VLLM_CPU_KVCACHE_SPACE (or kv-cache-memory-bytes): "
             "set it so the budget can predict the KV cache")
    _require((engine.get("kv_cache_memory_bytes") or 0) >= 0, "kv_cache_memory_bytes must not be negative")
    _require((engine.get("max_num_batched_tokens") or 1) > 0, "max_num_batched_tokens must be positive")
    _require(kv_cache_dtype == "auto" or kv_cache_dtype in KV_DTYPE_BYTES,
             "unknown kv_cache_dtype %r; use auto, %s" % (kv_cache_dtype, ", ".join(sorted(KV_DTYPE_BYTES))))
    _require(block_size > 0 and max_model_len_multiple > 0, "block_size and max_model_len_multiple must be positive")
    _require(tiers, "no quantization tiers on offer")
    for tier in tiers:
        _require(tier["name"] in TIER_BITS,
                 "unknown quantization tier %r; known tiers: %s" % (tier["name"], ", ".join(TIER_BITS)))
    for gpu in gpus:
        total, free = gpu.get("total"), gpu.get("free")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (total, free))
        _require(numbers and total > 0 and 0 <= free <= total,
                 "GPU %s: memory figures are not usable (total %r, free %r)"
                 % (gpu.get("index", "?"), gpu.get("total"), gpu.get("free")))
        others = gpu.get("other_processes")
        _require(others is None or (isinstance(others, (int, float)) and not isinstance(others, bool)
                                    and 0 <= others <= total),
                 "GPU %s: other processes' memory %r is not a byte count within the total" % (gpu.get("index", "?"), others))


def resolve_engine(engine, gpus, desired_utilization, max_num_seqs):
    """The engine settings the budget models: the user's, else the engine version's own defaults."""
    engine = dict(engine or {})
    totals = [g.get("total") for g in gpus if isinstance(g.get("total"), (int, float))]
    total = min(totals) if totals else 0
    _require(not (engine.get("extensible_kv_cache") and engine.get("kv_cache_memory_bytes")),
             "enable-extensible-kv-cache sizes the KV cache from measured memory, which kv_cache_memory_bytes "
             "overrides: vLLM refuses the two together; leave one out")
    extensible = False if engine.get("kv_cache_memory_bytes") else engine.get("extensible_kv_cache")
    defaults = engine_memory.engine_defaults(engine.get("version"), engine.get("gpu_name"), total,
                                             engine.get("v0_engine"), extensible)
    resolved = dict(defaults, **{k: v for k, v in engine.items() if v is not None and k != "extensible_kv_cache"})
    resolved["platform"] = resolved.get("platform") or "cuda"
    resolved["max_num_batched_tokens_source"] = "set" if engine.get("max_num_batched_tokens") else "engine default"
    if resolved["platform"] == "cpu":
        resolved["cudagraph_counted"] = False      # the CPU engine captures no CUDA graphs
    utilization = desired_utilization or defaults["gpu_memory_utilization"]
    seqs = max_num_seqs or defaults["max_num_seqs"]
    return resolved, utilization, seqs


def with_whole_vision_tower(profile, tiers):
    """The profile and tiers of an engine whose every rank holds the whole vision tower (run data-parallel,
    --mm-encoder-tp-mode data, or read in Mistral's format: engine_memory.vision_tower_whole): tower_bytes, read from
    the shard headers, in place of its share."""
    tiers = [dict(tier, weight_bytes_per_rank=tier["weight_bytes_per_rank"] - tier["tower_bytes_per_rank"]
                  + tier["tower_bytes"], tower_bytes_per_rank=tier["tower_bytes"])
             if tier.get("weight_bytes_per_rank") and tier.get("tower_bytes") is not None
             and tier.get("tower_bytes_per_rank") is not None else tier for tier in tiers]
    return dict(profile, vision_replicated=True), tiers


def without_vision_tower(profile, tiers):
    """The profile and tiers of an engine that builds no multimodal tower: its parameters out of the counts, its
    tensors (tower_bytes_per_rank, read from the shard headers) out of each tier's measured bytes."""
    params = profile["params"]
    profile = dict(profile, params=dict(params, total=params["total"] - params["vision"], vision=0),
                   vision_replicated=False)
    tiers = [dict(tier, weight_bytes_per_rank=tier["weight_bytes_per_rank"] - tier["tower_bytes_per_rank"])
             if tier.get("weight_bytes_per_rank") and tier.get("tower_bytes_per_rank") else tier for tier in tiers]
    return profile, tiers


def plan(profile, tiers, gpus, gpu_memory_utilization=None, kv_cache_dtype="auto", max_model_len=None,
         min_max_model_len=None, max_num_seqs=None, min_max_num_seqs=1, tensor_parallel_size=None,
         block_size=None, max_model_len_multiple=1024, load_mtp=False, engine=None, pipeline_parallel_size=1,
         nodes_needed_up_to=8, hold_utilization=False):
    """Choose quantization, max_model_len and max_num_seqs that fit this host (or node group).

    profile: the model profile read from config.json (model_config.model_profile).
    tiers: dicts with name, present (weight files intact), bits (else the tier's), measured_bytes
    (checkpoint total) or weight_bytes_per_rank, dtype, quantization, weights_dir, reason.
    gpus: dicts with index, total, free (bytes; free already counts our own engine's memory), and optionally
    other_processes (bytes other processes hold on it: engines that measure device-wide count them).
    engine: version, platform (cuda|cpu), gpu_name, nvlink (the GPUs' NVLink state, None: by the name),
    max_num_batched_tokens, enforce_eager, flashinfer_sampler (engine_memory.sorting_sampler),
    kv_cache_memory_bytes, runtime_overhead_gib (a flat override), model_id and calibration_entries
    (the calibration store's entries: one whose key matches a setting replaces the modelled
    overhead); unset knobs take the engine version's defaults.
    pipeline_parallel_size: stages across the nodes of a group; gpus are then every GPU of the group
    (tensor_parallel_size per node, default the GPUs of one node) and the tightest stage is budgeted.
    nodes_needed_up_to: when one host cannot hold the model, how many such hosts (pipeline stages) to try
    for the verdict's "N such nodes would hold it" (0: do not try).
    hold_utilization: keep the utilization even where the engine's graphs would not fit outside it after the KV
    cache (a prediction of what an engine started with it did, as the benchmark makes); by default it is lowered
    to leave them room (room_after_kv).
    """
    engine, gpu_memory_utilization, max_num_seqs = resolve_engine(engine, gpus, gpu_memory_utilization,
                                                                  max_num_seqs)
    load_mtp = engine_memory.loads_mtp(engine, load_mtp)
    tower_skipped = engine_memory.vision_tower_skipped(profile, engine)
    if tower_skipped:
        profile, tiers = without_vision_tower(profile, tiers)
    elif engine_memory.vision_tower_whole(profile, engine):
        profile, tiers = with_whole_vision_tower(profile, tiers)
    block_size = block_size or engine_memory.default_block_size(engine["platform"], bool(profile.get("mla")),
                                                                engine.get("version"))
    validate_request(profile, tiers, gpus, gpu_memory_utilization, kv_cache_dtype, block_size,
                     max_model_len_multiple, engine)
    context = profile["max_position_embeddings"]
    max_model_len = max_model_len or context
    min_max_model_len = min_max_model_len or min(4096, max_model_len)
    _require(max_model_len > 0 and min_max_model_len > 0, "max_model_len values must be positive")
    _require(min_max_model_len <= max_model_len,
             "min_max_model_len %d is above max_model_len %d" % (min_max_model_len, max_model_len))
    _require(max_model_len <= context,
             "max_model_len %d is above the model's context %d (vLLM refuses it)" % (max_model_len, context))
    _require(1 <= min_max_num_seqs <= max_num_seqs,
             "need 1 <= min_max_num_seqs (%s) <= max_num_seqs (%s)" % (min_max_num_seqs, max_num_seqs))

    if engine.get("v0_engine") and engine["max_num_batched_tokens_source"] == "engine default":
        # the V0 engine's batch follows max_model_len: the requested one here, each retreat state's in state_settings
        engine["max_num_batched_tokens"] = engine_memory.v0_batched_tokens(engine.get("version"), max_model_len,
                                                                           profile, engine)
    requested_kv_dtype = kv_cache_dtype
    kv_cache_dtype = engine_memory.checkpoint_kv_cache_dtype(profile, kv_cache_dtype, (engine or {}).get("version"))
    pp = pipeline_parallel_size or 1
    tp = len(gpus) // pp if tensor_parallel_size is None else tensor_parallel_size
    check_pipeline_parallel(profile, pp, tp, len(gpus))
    check_tensor_parallel(profile, tp, len(gpus) // pp)
    used = gpus[:tp * pp]
    engine["other_processes_bytes"] = max(int(g.get("other_processes") or 0) for g in used)
    util, util_reason = effective_utilization(utilization_bounds(used, engine), gpu_memory_utilization)

    offered = sorted((dict(t, bits=t.get("bits") or TIER_BITS[t["name"]]) for t in tiers), key=lambda t: -t["bits"])
    present = [t for t in offered if t.get("present")]
    skipped = [{"quantization": t["name"], "status": t.get("status") or "missing",
                "reason": t.get("reason") or "no weight files"} for t in offered if not t.get("present")]
    params = profile["params"]
    result = {
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "gpu_memory_utilization": util,
        "gpu_memory_utilization_requested": gpu_memory_utilization,
        "utilization_note": util_reason,
        "kv_cache_dtype": kv_cache_dtype,
        "kv_cache_dtype_source": "checkpoint" if kv_cache_dtype != requested_kv_dtype else "request",
        "free_gib_per_gpu": [gib(g["free"]) for g in used],
        "skipped_tiers": skipped,
        "active_params_b": round((params.get("active") or 0) / 1e9, 2),
        "total_params_b": round(params["total"] / 1e9, 2),
        "mtp_params_b": round((params.get("mtp") or 0) / 1e9, 2),
        "vision_tower_skipped": tower_skipped,
        "engine": engine_summary(engine),
        "ladder": [],
    }
    if not present:
        raise BudgetInputError("no quantization tier has weight files on this host: %s"
                               % "; ".join("%s: %s" % (s["quantization"], s["reason"]) for s in skipped))
    if util <= 0:
        return _cannot_hold(result, None, None, "no usable free memory: %s" % util_reason)

    ctx = {
        "profile": profile, "tp": tp, "pp": pp, "kv_cache_dtype": kv_cache_dtype, "block_size": block_size,
        "load_mtp": load_mtp, "engine": engine,
        "free_min": min(g["free"] for g in used),
        "engine_bytes": min(int(math.ceil(g["total"] * util)) for g in used),
    }
    state = {"tier": present[0], "max_model_len": max_model_len, "max_num_seqs": max_num_seqs}
    table = evaluate(state, ctx)
    if not hold_utilization:
        util, util_reason, table = _room_after_kv(ctx, state, table, util, util_reason, used)
        result.update(gpu_memory_utilization=util, utilization_note=util_reason)
    ladder = result["ladder"]
    ladder.append(_step("initial", state, table))
    result["_ctx"] = ctx

    def meets(**change):
        return _fits(evaluate(dict(state, **change), ctx))

    # (1) lower quantization tiers, one at a time
    for tier in present[1:]:
        if _fits(table):
            break
        state = dict(state, tier=tier)
        table = evaluate(state, ctx)
        ladder.append(_step("lower quantization to %s" % tier["name"], state, table))

    # (2) lower max_model_len: the largest multiple that fits, never below the minimum
    if not _fits(table):
        multiple = max_model_len_multiple
        top = state["max_model_len"] // multiple
        low = -(-min_max_model_len // multiple)
        best = _largest_fitting(low, top, lambda k: meets(max_model_len=k * multiple))
        if best:
            new_len = best * multiple
        else:   # no multiple fits: a length below one multiple is kept as it is (short beats none)
            below = min(multiple - 1, state["max_model_len"])
            new_len = _largest_fitting(min_max_model_len, below, lambda n: meets(max_model_len=n)) or min_max_model_len
        if new_len != state["max_model_len"]:
            state = dict(state, max_model_len=new_len)
            table = evaluate(state, ctx)
            ladder.append(_step("lower max_model_len to %d" % new_len, state, table))

    # (3) lower max_num_seqs, never below the minimum
    if not _fits(table):
        best = _largest_fitting(min_max_num_seqs, state["max_num_seqs"] - 1, lambda n: meets(max_num_seqs=n))
        new_seqs = best or min_max_num_seqs
        if new_seqs != state["max_num_seqs"]:
            state = dict(state, max_num_seqs=new_seqs)
            table = evaluate(state, ctx)
            ladder.append(_step("lower max_num_seqs to %d" % new_seqs, state, table))

    if not _fits(table):
        why = ("weights (%.2f GiB per GPU) and the engine's overhead (%.2f GiB) leave %.2f GiB for the KV cache, "
               "but the smallest setting (%s, max_model_len %d, max_num_seqs %d) needs %.2f GiB"
               % (table["weights"] / GIB, table["overhead"] / GIB, table["kv_available"] / GIB,
                  state["tier"]["name"], state["max_model_len"], state["max_num_seqs"], table["kv_needed"] / GIB))
        result = _cannot_hold(result, state, table, why)
        if pp == 1 and nodes_needed_up_to > 1:
            add_nodes_needed(result, nodes_needed_up_to, lambda nodes: plan(
                profile, tiers, list(used) * nodes, gpu_memory_utilization=gpu_memory_utilization,
                kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, min_max_model_len=min_max_model_len,
                max_num_seqs=max_num_seqs, min_max_num_seqs=min_max_num_seqs, tensor_parallel_size=tp,
                block_size=block_size, max_model_len_multiple=max_model_len_multiple, load_mtp=load_mtp,
                engine=engine, pipeline_parallel_size=nodes, nodes_needed_up_to=0),
                hopeless=lambda nodes: weights_overflow(ctx, present, nodes))
        return result
    return _fitted(result, state, table)


def weights_overflow(ctx, tiers, pp):
    """True when, split into pp stages, every tier leaves some stage's rank with weights no smaller than what
    the engine asks for (less the lowest calibrated overhead, when one is below zero): no setting of such a
    group starts, so nodes_needed need not budget it. A cheap lower bound; the answer is the same."""
    engine = ctx["engine"]
    if engine.get("kv_cache_memory_bytes"):
        return False                    # a KV cache sized by hand does not shrink with the weights' room
    overheads = [e.get("overhead_bytes") for e in (engine.get("calibration_entries") or {}).values()
                 if isinstance(e, dict) and isinstance(e.get("overhead_bytes"), int)]
    room = ctx["engine_bytes"] - min([0] + overheads)
    shares = stage_shares(ctx["profile"], pp, ctx["load_mtp"])
    for tier in tiers:                  # as evaluate_stage weighs one stage's rank
        measured = tier.get("weight_bytes_per_rank")
        if measured is None and tier.get("measured_bytes"):
            measured = tier["measured_bytes"] // ctx["tp"]
        heaviest = 0
        for share in shares:
            nominal, fraction = stage_weight_bytes(ctx["profile"], tier["bits"], ctx["tp"], share, ctx["load_mtp"])
            stage = int(measured * fraction) if measured else measured
            heaviest = max(heaviest, stage if stage else nominal)
        if heaviest < room:
            return False
    return True


def add_nodes_needed(result, up_to, plan_for, hopeless=None):
    """For a host that cannot hold the model: the fewest such hosts, one pipeline stage each, that would
    (result["nodes_needed"], None when not even up_to would), and the plan they would get. hopeless(nodes),
    when given, says a group of that many cannot hold it without budgeting the group."""
    result["nodes_needed"] = None
    for nodes in range(2, up_to + 1):
        if hopeless and hopeless(nodes):
            continue
        try:
            group = plan_for(nodes)
        except BudgetInputError:
            break                       # more stages than layers, or an unusable split
        if group["fits"]:
            result["nodes_needed"] = nodes
            result["nodes_needed_plan"] = {k: group[k] for k in (
                "quantization", "max_model_len", "max_num_seqs", "tensor_parallel_size", "pipeline_parallel_size",
                "kv_cache_tokens", "verdict")}
            result["reason"] += ("; %d such nodes would hold it (tensor parallel %d x pipeline parallel %d: %s, "
                                 "max_model_len %d, max_num_seqs %d)" % (
                                     nodes, group["tensor_parallel_size"], nodes, group["quantization"],
                                     group["max_model_len"], group["max_num_seqs"]))
            return
    result["reason"] += "; not even %d such nodes would hold it" % up_to


# Settings read from the engine's further vLLM config (engine_memory.CONFIG_SETTINGS), null where it did not set them.
ENGINE_CONFIG_SETTINGS = tuple(setting for setting in engine_memory.CONFIG_SETTINGS.values()
                               if setting != "block_size") + ("num_speculative_tokens", "speculative_method")


def engine_summary(engine):
    keys = ("version", "platform", "gpu_name", "nvlink", "fully_connected", "p2p", "nnodes", "max_num_batched_tokens",
            "max_num_batched_tokens_source",
            "enforce_eager", "expert_parallel", "flashinfer_sampler", "cudagraph_counted", "v0_engine",
            "model_runner_v2", "environment", "kv_cache_memory_bytes", "runtime_overhead_gib",
            "model_id", "mistral_format_files") + ENGINE_CONFIG_SETTINGS
    return {k: engine.get(k) for k in keys}


def _verdicts(table, max_num_seqs):
    one_request = ("one request of max_model_len needs %.2f GiB of KV cache, %.2f GiB available"
                   % (table["kv_one_request"] / GIB, table["kv_available"] / GIB))
    target = ("%s the target: %d requests need %.2f GiB, expected concurrency %.2f"
              % ("meets" if table["headroom"] >= 0 else "misses", max_num_seqs, table["kv_needed"] / GIB,
                 table["max_concurrency"]))
    certainty = TIGHT if abs(table["start_margin"]) < table["start_error"] else CLEAR
    if certainty == TIGHT:
        one_request += ("; tight: %.2f GiB from that line, within the budget's error of %.2f GiB, so vLLM's own check "
                        "may go either way" % (abs(table["start_margin"]) / GIB, table["start_error"] / GIB))
    if table["starts"]:
        note = "starts: " + one_request
    elif table.get("kv_starts", True) is False:
        note = "does not start: " + one_request
    else:
        note = ("does not start: after the KV cache, the CUDA graphs and the sampler's warm-up need %.2f GiB outside "
                "the requested memory, %.2f GiB is there (lower gpu_memory_utilization or max_num_seqs, or "
                "enforce_eager)" % (table["after_kv"] / GIB, table["room_after_kv"] / GIB))
    return {"starts": table["starts"], "starts_certainty": certainty,
            "meets_target": table["starts"] and table["headroom"] >= 0, "starts_note": note, "target_note": target}


def _fitted(result, state, table):
    tier = state["tier"]
    result["calibration_fields"] = calibration_fields(result.pop("_ctx"), state)
    result["engine"]["max_num_batched_tokens"] = result["calibration_fields"]["max_num_batched_tokens"]
    steps = len(result["ladder"]) - 1
    result.update(_verdicts(table, state["max_num_seqs"]))
    result.update({
        "fits": True,
        "status": FITS if steps == 0 else RETREATED,
        "verdict": "fits" if steps == 0 else "retreated %d step%s" % (steps, "" if steps == 1 else "s"),
        "steps_retreated": steps,
        "quantization": tier["name"],
        "vllm_quantization": tier.get("quantization") or TIER_DEFAULT_QUANTIZATION[tier["name"]],
        "dtype": tier.get("dtype") or "bfloat16",
        "weights_dir": tier.get("weights_dir"),
        "max_model_len": state["max_model_len"],
        "max_num_seqs": state["max_num_seqs"],
        "budget_gib": table_in_gib(table),
        "budget_bytes": table,
        "kv_cache_tokens": table["kv_cache_tokens"],
        "max_concurrency": table["max_concurrency"],
        "shortfall_gib": 0.0,
    })
    return result


def _cannot_hold(result, state, table, why):
    ctx = result.pop("_ctx", None)
    result["calibration_fields"] = calibration_fields(ctx, state) if ctx and state else None
    shortfall = -table["headroom"] if table else None
    result.update(_verdicts(table, state["max_num_seqs"]) if table else
                  {"starts": False, "starts_certainty": CLEAR, "meets_target": False, "starts_note": why,
                   "target_note": why})
    result.update({
        "fits": False,
        "status": CANNOT_HOLD,
        "verdict": "cannot hold",
        "steps_retreated": max(len(result["ladder"]) - 1, 0),
        "quantization": state["tier"]["name"] if state else None,
        "max_model_len": state["max_model_len"] if state else None,
        "max_num_seqs": state["max_num_seqs"] if state else None,
        "budget_gib": table_in_gib(table) if table else None,
        "budget_bytes": table,
        "kv_cache_tokens": table["kv_cache_tokens"] if table else 0,
        "max_concurrency": table["max_concurrency"] if table else 0.0,
        "shortfall_gib": gib(shortfall) if shortfall is not None else None,
        "reason": "this host cannot hold the model: %s%s" % (
            why, "; short by %.2f GiB per GPU" % (shortfall / GIB) if shortfall is not None else ""),
    })
    return result
