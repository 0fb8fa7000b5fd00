# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""safetensors checkpoints: headers, integrity, and the weight bytes each tensor-parallel rank holds.

Only the 8-byte little-endian header length and the JSON header of each shard are read, never
tensor data (https://github.com/huggingface/safetensors, "Format").  A shard is intact only when
its size is exactly 8 + header length + the end of its last tensor, which is what the
safetensors loader itself requires (a shorter file is a truncated download).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import re
import struct

from ansible_collections.hy3.fleet.plugins.module_utils.model_config import ATTENTION_KINDS

# Bits per element of each safetensors dtype.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "F4": 4, "F6_E2M3": 6,
    "F6_E3M2": 6,
}
# Nominal weight bits of a checkpoint whose linear weights are stored in this dtype.
WEIGHT_DTYPE_BITS = {"BF16": 16, "F16": 16, "F32": 32, "F8_E4M3": 8, "F8_E5M2": 8, "F4": 4, "I8": 8}
# The floating dtypes an unquantized checkpoint's tensors are cast from: vLLM builds every parameter in the
# served dtype (--dtype) and copies the file's tensor into it, so an F32 checkpoint served in bfloat16 takes half
# its files' bytes on the GPU, and a bfloat16 one served in float32 twice.
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
MAX_HEADER_BYTES = 100 * 1000 * 1000      # the safetensors format's own limit
INDEX_NAME = "model.safetensors.index.json"
# vLLM pads the vocabulary to a multiple of 64 before splitting it over ranks
# (vllm/model_executor/layers/vocab_parallel_embedding.py, DEFAULT_VOCAB_PADDING_SIZE).
VOCAB_PADDING = 64

# Quantization side tensors: not parameters, but bytes that are loaded.
_AUX_SUFFIXES = (".weight_scale", ".weight_scale_inv", ".input_scale", ".scales", ".qzeros", ".g_idx",
                 ".k_scale", ".v_scale", ".zeros", ".weight_shape", ".weight_zero_point", ".weight_global_scale")
_PACKED_SUFFIX = ".qweight"               # GPTQ/AWQ: int32 words holding 32/bits weights each

# Tensor-parallel rule, by tensor name: vLLM loads these whole on every rank ...
_REPLICATED_RE = re.compile(r"(norm|layernorm)\.(weight|bias)$|"
                            r"\.(router\.gate|mlp\.gate|block_sparse_moe\.gate)\.weight$|"
                            r"(expert_bias|e_score_correction_bias)$|"
                            r"\.(q_a_proj|kv_a_proj_with_mqa|eh_proj)\.|"
                            r"\.indexer\.(wq_b|wk|weights_proj)\.")      # DeepSeek-V3.2 / GLM-5's (ReplicatedLinear)
# ... these are split by vocabulary rows (VocabParallelEmbedding / ParallelLMHead) ...
_VOCAB_RE = re.compile(r"(embed_tokens|lm_head|shared_head\.head|wte)\.")
# ... these hold KV heads: split by head, but never below one head per rank ...
_KV_RE = re.compile(r"\.(k_proj|v_proj)\.")
# ... and everything else (q/o projections, dense MLPs, every expert) is split evenly.

OK, ABSENT, WEIGHT_LOADING = "ok", "absent", "weight_loading"


class CheckpointError(ValueError):
    """A checkpoint file the engine would fail to load; names the file and what is wrong."""

    status = WEIGHT_LOADING

    def __init__(self, path, problem, detail):
        self.path, self.problem, self.detail = path, problem, detail
        super(CheckpointError, self).__init__("%s: %s" % (path, detail))


def read_shard_header(path, size=None):
    """{tensor name: (dtype, shape, nbytes)} of one shard, after checking that its size is exact."""
    size = os.path.getsize(path) if size is None else size
    if size < 8:
        raise CheckpointError(path, "truncated", "%d bytes: too short to hold the 8-byte header length" % size)
    with open(path, "rb") as handle:
        header_len = struct.unpack("<Q", handle.read(8))[0]
        if header_len > MAX_HEADER_BYTES:
            raise CheckpointError(path, "corrupt_header", "header length %d runs past the end of the %d-byte file "
                                  "(beyond the format's 100 MB limit: not a safetensors file)" % (header_len, size))
        if 8 + header_len > size:
            raise CheckpointError(path, "truncated", "header length %d runs past the end of the %d-byte file "
                                  "(truncated inside the header)" % (header_len, size))
        raw = handle.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(path, "corrupt_header", "header is not valid JSON: %s" % err) from err
    if not isinstance(header, dict):
        raise CheckpointError(path, "corrupt_header", "header is not a JSON object")
    tensors, data_end = {}, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:                                        # one lean pass: a Hy3 checkpoint has ~50k-200k tensors
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            nbytes = (math.prod(shape) * DTYPE_BITS[dtype] + 7) // 8
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(path, "corrupt_header", "tensor %s: entry %r is not dtype/shape/data_offsets"
                                  % (name, entry)) from err
        if end - begin != nbytes or begin < 0:
            raise CheckpointError(path, "corrupt_header", "tensor %s: data_offsets %s hold %d bytes, its %s %s needs %d"
                                  % (name, [begin, end], end - begin, dtype, shape, nbytes))
        tensors[name] = (dtype, shape, nbytes)
        if end > data_end:
            data_end = end
    expected = 8 + header_len + data_end
    if size != expected:
        kind = "truncated" if size < expected else "corrupt_header"
        raise CheckpointError(path, kind, "file is %d bytes, its header describes %d (8 + %d header + %d data): %s"
                              % (size, expected, header_len, data_end,
                                 "truncated download" if size < expected else "bytes beyond the last tensor"))
    return tensors


def read_index(directory):
    """(weight_map, total_size or None) from model.safetensors.index.json, or (None, None) without one."""
    path = os.path.join(directory, INDEX_NAME)
    if not os.path.isfile(path):
        return None, None
    try:
        with open(path) as handle:
            index = json.load(handle)
    except ValueError as err:
        raise CheckpointError(path, "corrupt_index", "is not valid JSON: %s" % err) from err
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(path, "corrupt_index", "weight_map is missing or empty")
    total = (index.get("metadata") or {}).get("total_size")
    return weight_map, (int(total) if total is not None else None)


def read_checkpoint(directory):
    """Every shard's header, checked against the index: {shards, tensors, total_size}.

    tensors maps each tensor name to (shard file, dtype, shape, nbytes).  Raises CheckpointError
    for the first damaged file (missing shard, truncated, corrupt header, index disagreeing).
    """
    weight_map, total_size = read_index(directory)
    shards = (_unindexed_shards(os.listdir(directory)) if weight_map is None else sorted(set(weight_map.values())))
    tensors = {}
    for shard in shards:
        path = os.path.join(directory, shard)
        if not os.path.isfile(path):
            raise CheckpointError(path, "missing_shard", "shard named in %s is missing" % INDEX_NAME)
        for name, (dtype, shape, nbytes) in read_shard_header(path).items():
            tensors[name] = (shard, dtype, shape, nbytes)
    if weight_map is not None:
        _check_index(directory, weight_map, total_size, tensors)
    return {"shards": shards, "tensors": tensors, "total_size": total_size}


def _unindexed_shards(names):
    """The safetensors files of a directory without an index: all of them, but Mistral's consolidated*.safetensors
    where other shards are there too (mistralai's repositories ship the weights twice, once per format)."""
    shards = sorted(name for name in names if name.endswith(".safetensors"))
    others = [name for name in shards if not is_mistral_consolidated(name)]
    return others or shards


def is_mistral_consolidated(name):
    """Whether a file name is one of Mistral's own-format weight files (consolidated.safetensors,
    consolidated-00001-of-00002.safetensors)."""
    return name.startswith("consolidated") and name.endswith(".safetensors")


def _check_index(directory, weight_map, total_size, tensors):
    index_path = os.path.join(directory, INDEX_NAME)
    for name, shard in weight_map.items():
        found = tensors.get(name)
        if found is None or found[0] != shard:
            where = "is not in any shard" if found is None else "is in %s" % found[0]
            raise CheckpointError(os.path.join(directory, shard), "index_mismatch",
                                  "tensor %s named by %s for this shard %s" % (name, INDEX_NAME, where))
    data = sum(t[3] for t in tensors.values())
    if total_size is not None and total_size != data:
        raise CheckpointError(index_path, "index_mismatch", "metadata.total_size %d differs from the %d bytes "
                              "of tensor data the shard headers describe" % (total_size, data))


# --- what the headers say -----------------------------------------------------------------------

# Where checkpoints keep their next-token-prediction (MTP) layers besides DeepSeek-V3's layers numbered after the
# model's own (Hy3, GLM-4.5, MiniMax): Qwen3-Next / Qwen3.5 under mtp., MiMo under model.mtp_layers.
MTP_MODULE_PREFIXES = ("mtp.", "model.mtp_layers.")
# An MTP layer's own copies of the embedding and the LM head (DeepSeek-V3 ships them): vLLM frees them and shares
# the target's (llm_base_proposer "Sharing target model embedding / lm_head weights", single-stage engines).
MTP_SHARED_COPIES = re.compile(r"(embed_tokens|shared_head\.head)\.weight$")


# A multimodal checkpoint's encoder tower and its projector into the language model, by top-level module (Qwen-VL's
# visual., LLaVA / Gemma 3 / Mistral 3's vision_tower. and multi_modal_projector., Llama 4 / InternVL's vision_model.
# and mlp1., Gemma 4's embed_vision., MiniCPM-V's vpm. and resampler., Keye's mlp_AR.; under model. in newer exports,
# thinker. in Qwen2.5-Omni's). vLLM builds
# none of it when the engine takes no image or video input (engine_memory.vision_tower_skipped).
TOWER_TENSORS = re.compile(r"^(?:model\.|thinker\.)?(?:visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|"
                           r"mm_projector|embed_vision|mlp1|mlp_AR|vpm|resampler)\.")


def mtp_prefixes(num_hidden_layers, count=8):
    """Name prefixes of next-token-prediction layers: numbered after the model's own (DeepSeek-V3 layout), or in a
    module of their own (MTP_MODULE_PREFIXES)."""
    return tuple("model.layers.%d." % n for n in range(num_hidden_layers, num_hidden_layers + count)) + MTP_MODULE_PREFIXES


def _name_tail(name):
    """The last three dotted parts: all the split rule looks at, and few distinct values (cache key)."""
    return name[name.rfind(".", 0, name.rfind(".", 0, name.rfind("."))) + 1:]


def tensor_split_kind(name):
    """replicated | vocab | kv | split: how vLLM shards this tensor over tensor-parallel ranks."""
    if _REPLICATED_RE.search(name):
        return "replicated"
    if _VOCAB_RE.search(name):
        return "vocab"
    if _KV_RE.search(name):
        return "kv"
    return "split"


def rank_share(kind, nbytes, tp, kv_heads=None, rows=None):
    """Bytes of one tensor on one rank.

    replicated: whole on every rank; split: 1/tp; kv: 1/min(tp, kv_heads) (a rank keeps at least
    one whole KV head, replicating it when tp > kv_heads); vocab: rows padded to a multiple of 64,
    then ceil(padded / tp) rows per rank.
    """
    if kind == "replicated" or tp == 1:
        return nbytes
    if kind == "kv":
        return -(-nbytes // min(tp, kv_heads or tp))
    if kind == "vocab" and rows:
        padded = -(-rows // VOCAB_PADDING) * VOCAB_PADDING
        return -(-nbytes * -(-padded // tp) // rows)
    return -(-nbytes // tp)


class _Kinds(dict):
    """Per-name facts, keyed by the name's tail (cached: a checkpoint repeats a few dozen tails)."""

    def __missing__(self, tail):
        kind = tensor_split_kind("." + tail)
        aux = tail.endswith(_AUX_SUFFIXES)
        packed = tail.endswith(_PACKED_SUFFIX)
        self[tail] = value = (kind, aux, packed, not aux and kind in ("split", "kv"))
        return value


def summarize(tensors, num_hidden_layers, tp=1, kv_heads=None, packed_bits=4, served_float_bytes=None):
    """Header facts over {name: (shard, dtype, shape, nbytes)}.

    params / params_mtp: parameters (quantization side tensors left out, packed int words unpacked);
    data_bytes / mtp_bytes (the files'); bytes_by_dtype; weight_bytes_per_rank / mtp_bytes_per_rank for tp ranks
    as loaded: with served_float_bytes (an unquantized checkpoint's served dtype) its floating tensors at that size
    (FLOAT_DTYPES); tower_bytes_per_rank, the multimodal tower's part of them (TOWER_TENSORS), and tower_bytes, the
    whole tower as loaded (what each rank holds when the engine runs it data-parallel); weight_dtype (dtype
    of most linear-weight bytes, "packed" for GPTQ/AWQ) and its nominal bits (the served dtype's where it casts them).
    MTP tensors are those of layers numbered from num_hidden_layers on (DeepSeek-V3 layout) or under an MTP module
    (mtp_prefixes); their copies of the embedding and LM head are left out (vLLM shares the target's).
    """
    kinds, mtp_names = _Kinds(), mtp_prefixes(num_hidden_layers)
    # Tensors of one kind and size repeat thousands of times (experts): count them, then price each group once.
    groups = {}
    for name, (_shard, dtype, shape, nbytes) in tensors.items():
        in_mtp = name.startswith(mtp_names)
        if in_mtp and MTP_SHARED_COPIES.search(name):
            continue            # freed at load: the drafter uses the target's
        key = (_name_tail(name), dtype, nbytes, math.prod(shape), shape[0] if shape else None, len(shape) >= 2, in_mtp,
               bool(TOWER_TENSORS.match(name)))
        groups[key] = groups.get(key, 0) + 1
    main, mtp = dict(params=0, bytes=0, per_rank=0), dict(params=0, bytes=0, per_rank=0)
    by_dtype, linear_bytes, tower_per_rank, tower_whole = {}, {}, 0, 0
    for (tail, dtype, nbytes, count, rows, matrix, in_mtp, in_tower), tensors_in_group in groups.items():
        kind, aux, packed, linear = kinds[tail]
        part = mtp if in_mtp else main
        if not aux:
            part["params"] += tensors_in_group * (count * DTYPE_BITS[dtype] // packed_bits if packed else count)
        part["bytes"] += tensors_in_group * nbytes
        loaded = count * served_float_bytes if served_float_bytes and dtype in FLOAT_DTYPES else nbytes
        share = tensors_in_group * rank_share(kind, loaded, tp, kv_heads, rows)
        part["per_rank"] += share
        tower_per_rank += share if in_tower else 0
        tower_whole += tensors_in_group * loaded if in_tower else 0
        by_dtype[dtype] = by_dtype.get(dtype, 0) + tensors_in_group * nbytes
        if linear and (packed or matrix):
            key = "packed" if packed else dtype
            linear_bytes[key] = linear_bytes.get(key, 0) + tensors_in_group * nbytes
    out = {"params": main["params"], "params_mtp": mtp["params"], "data_bytes": main["bytes"],
           "mtp_bytes": mtp["bytes"], "weight_bytes_per_rank": main["per_rank"], "mtp_bytes_per_rank": mtp["per_rank"],
           "tower_bytes_per_rank": tower_per_rank, "tower_bytes": tower_whole}
    dominant = max(linear_bytes, key=linear_bytes.get) if linear_bytes else None
    bits = packed_bits if dominant == "packed" else WEIGHT_DTYPE_BITS.get(dominant)
    if served_float_bytes and dominant in FLOAT_DTYPES:
        bits = served_float_bytes * 8
    out.update(bytes_by_dtype=by_dtype, weight_dtype=dominant, bits=bits)
    return out


def profile_tensor_groups(profile, bits):
    """Header-less estimate: the profile's parameters grouped the way rank_share splits them.

    Embeddings, norms, routers and a vision tower stay 16-bit (quantized checkpoints leave them unquantized);
    the linear layers take the tier's bits.  Returns [(kind, bytes, rows)] for rank_share.
    """
    hidden, layers = profile["hidden_size"], profile["num_hidden_layers"]
    params = profile["params"]
    moe = profile.get("moe")
    routers = (layers - len(moe["dense_layers"])) * hidden * moe["num_experts"] if moe else 0
    norms = 2 * hidden * layers + hidden
    kinds = profile.get("layer_types") or []
    attention_layers = sum(1 for kind in kinds if kind in ATTENTION_KINDS) if kinds else layers
    kv = 0 if profile.get("mla") else 2 * attention_layers * hidden * profile["num_key_value_heads"] * profile["head_dim"]
    vision = params.get("vision") or 0
    per_layer_inputs = profile.get("per_layer_input_params") or 0      # Gemma 4's, within the embedding count
    linear = params["total"] - params["embedding"] - vision - routers - norms - kv
    vocab_tensors = 1 if profile["tie_word_embeddings"] else 2
    groups = [("vocab", profile["vocab_size"] * hidden * 2, profile["vocab_size"])] * vocab_tensors
    return groups + [("replicated", (routers + norms) * 2, None), ("kv", kv * bits // 8, None),
                     ("split", linear * bits // 8, None), ("split", per_layer_inputs * 2, None),
                     ("replicated" if profile.get("vision_replicated") else "split", vision * 2, None)]


def estimated_bytes_per_rank(profile, bits, tp):
    """One rank's weights (main model, no MTP) from the profile alone, when there are no headers to read.

    Approximate for MLA models (their replicated down-projections are counted as split).
    """
    return sum(rank_share(kind, nbytes, tp, profile["num_key_value_heads"], rows)
               for kind, nbytes, rows in profile_tensor_groups(profile, bits))
