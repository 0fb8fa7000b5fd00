#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write stand-in Hy3 checkpoints: real config.json, real tensor names and shapes, no tensor data.

Each shard is a valid safetensors file (8-byte header length, JSON header, data region) whose
data region is a hole (a sparse file: a ~600 GB checkpoint takes a few MB of disk).  Readers of
headers and sizes see exactly what a real download looks like; the engine could not run it.

    scripts/make_sample_checkpoints.py [OUT_DIR] [--formats bf16,fp8,int4] [--shard-gb 5] [--force]

writes OUT_DIR/hy3-bf16, OUT_DIR/hy3-fp8 and OUT_DIR/hy3-int4.  OUT_DIR defaults to
$HY3_SAMPLE_WEIGHTS, else ~/.cache/hy3-fleet/sample-weights: OUTSIDE the checkout on purpose.
The files add up to ~1 TB of apparent size; any copy that is not sparse-aware (tar without -S,
shutil.copytree, a collection build) would write that terabyte out, so they must not sit in a
tree that gets copied.

Tensor names follow the tencent/Hy3 checkpoint layout: dense layer 0 as mlp.{gate,up,down}_proj,
MoE layers with mlp.router.gate, mlp.expert_bias, mlp.shared_mlp.* and per-expert
mlp.experts.N.* (the names Hy3 tooling maps back to the hub checkpoint, e.g. the save-time
renames mlp.gate. -> mlp.router.gate., mlp.shared_experts. -> mlp.shared_mlp. in Tencent's
finetuning script, and llama.cpp-style loaders' hy_v3 tables); the MTP layer is numbered after the
last decoder layer with DeepSeek-V3-style enorm/hnorm/eh_proj/shared_head.norm (assumed).
Quantized forms: fp8 = tencent/Hy3-FP8 (per-tensor F8_E4M3 weights, a weight_scale and a static
input_scale per linear, embeddings/head left bf16); int4 = GPTQ W4A16, group 128 (qweight,
qzeros, scales, g_idx; no MTP layer, like AngelSlim/Hy3-GPTQ-Int4).
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import struct
import sys

# config.json of tencent/Hy3 (values: /work/shared/notes/hy3-checkpoint.md; model card
# https://huggingface.co/tencent/Hy3-preview).
HY3_CONFIG = {
    "architectures": ["HYV3ForCausalLM"],
    "model_type": "hy_v3",
    "dtype": "bfloat16",
    "num_hidden_layers": 80,
    "first_k_dense_replace": 1,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "intermediate_size": 13312,
    "moe_intermediate_size": 1536,
    "num_experts": 192,
    "num_experts_per_tok": 8,
    "num_shared_experts": 1,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 262144,
    "vocab_size": 120832,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "use_qk_norm": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 11158840.0},
}
QUANTIZATION_CONFIGS = {
    "bf16": None,
    "fp8": {"quant_method": "fp8", "activation_scheme": "static", "kv_cache_scheme": "static",
            "ignored_layers": ["lm_head", "model.embed_tokens"]},
    "int4": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
}
GPTQ_GROUP = 128
DEFAULT_OUT_DIR = os.environ.get("HY3_SAMPLE_WEIGHTS") or os.path.join(
    os.path.expanduser("~"), ".cache", "hy3-fleet", "sample-weights")
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1}


def layer_linears(config, layer, mtp=False):
    """(name, [out, in]) of every linear weight of one decoder layer (and the MTP projection)."""
    hidden, heads, kv, head_dim = (config["hidden_size"], config["num_attention_heads"],
                                   config["num_key_value_heads"], config["head_dim"])
    prefix = "model.layers.%d." % layer
    out = [(prefix + "self_attn.q_proj", [heads * head_dim, hidden]),
           (prefix + "self_attn.k_proj", [kv * head_dim, hidden]),
           (prefix + "self_attn.v_proj", [kv * head_dim, hidden]),
           (prefix + "self_attn.o_proj", [hidden, heads * head_dim])]
    if layer < config["first_k_dense_replace"]:
        out += _mlp(prefix + "mlp.", hidden, config["intermediate_size"])
    else:
        for expert in range(config["num_experts"]):
            out += _mlp(prefix + "mlp.experts.%d." % expert, hidden, config["moe_intermediate_size"])
        out += _mlp(prefix + "mlp.shared_mlp.", hidden, config["moe_intermediate_size"])
    if mtp:
        out.append((prefix + "eh_proj", [hidden, 2 * hidden]))
    return out


def _mlp(prefix, hidden, intermediate):
    return [(prefix + "gate_proj", [intermediate, hidden]), (prefix + "up_proj", [intermediate, hidden]),
            (prefix + "down_proj", [hidden, intermediate])]


def layer_unquantized(config, layer, mtp=False):
    """(name, dtype, shape) of the tensors every format keeps in high precision: norms, router."""
    hidden, head_dim, prefix = config["hidden_size"], config["head_dim"], "model.layers.%d." % layer
    out = [(prefix + "input_layernorm.weight", "BF16", [hidden]),
           (prefix + "post_attention_layernorm.weight", "BF16", [hidden]),
           (prefix + "self_attn.q_norm.weight", "BF16", [head_dim]),
           (prefix + "self_attn.k_norm.weight", "BF16", [head_dim])]
    if layer >= config["first_k_dense_replace"]:
        out += [(prefix + "mlp.router.gate.weight", "BF16", [config["num_experts"], hidden]),
                (prefix + "mlp.expert_bias", "F32", [config["num_experts"]])]
    if mtp:
        norms = ("enorm.weight", "hnorm.weight", "shared_head.norm.weight")
        out += [(prefix + name, "BF16", [hidden]) for name in norms]
    return out


def quantized_linear(name, shape, fmt):
    """The tensors one linear weight [out, in] becomes in a format."""
    out_dim, in_dim = shape
    if fmt == "bf16":
        return [(name + ".weight", "BF16", shape)]
    if fmt == "fp8":
        return [(name + ".weight", "F8_E4M3", shape), (name + ".weight_scale", "BF16", []),
                (name + ".input_scale", "BF16", [])]
    groups = in_dim // GPTQ_GROUP
    return [(name + ".qweight", "I32", [in_dim // 8, out_dim]), (name + ".qzeros", "I32", [groups, out_dim // 8]),
            (name + ".scales", "F16", [groups, out_dim]), (name + ".g_idx", "I32", [in_dim])]


def hy3_tensors(fmt, config=None):
    """Every (name, dtype, shape) of a Hy3 checkpoint in format bf16, fp8 or int4."""
    config = config or HY3_CONFIG
    vocab, hidden, layers = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
    with_mtp = fmt != "int4"
    tensors = [("model.embed_tokens.weight", "BF16", [vocab, hidden])]
    for layer in range(layers + (config["num_nextn_predict_layers"] if with_mtp else 0)):
        mtp = layer >= layers
        tensors += layer_unquantized(config, layer, mtp)
        for name, shape in layer_linears(config, layer, mtp):
            tensors += quantized_linear(name, shape, fmt)
    tensors += [("model.norm.weight", "BF16", [hidden]), ("lm_head.weight", "BF16", [vocab, hidden])]
    return tensors


def nbytes(dtype, shape):
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_BYTES[dtype]


def split_shards(tensors, shard_bytes):
    shards, current, size = [], [], 0
    for tensor in tensors:
        if current and size + nbytes(tensor[1], tensor[2]) > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(tensor)
        size += nbytes(tensor[1], tensor[2])
    return shards + ([current] if current else [])


def write_shard(path, tensors):
    """A valid safetensors file whose data region is left as a hole (sparse)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)                 # the format pads the header to 8 bytes
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(8 + len(raw) + offset)
    return offset


def write_checkpoint(directory, tensors, config, shard_bytes=5 * 10 ** 9):
    """config.json, shards and model.safetensors.index.json in directory (created)."""
    os.makedirs(directory)
    shards = split_shards(tensors, shard_bytes)
    weight_map, total = {}, 0
    for number, shard in enumerate(shards, 1):
        name = "model-%05d-of-%05d.safetensors" % (number, len(shards))
        total += write_shard(os.path.join(directory, name), shard)
        weight_map.update((tensor[0], name) for tensor in shard)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, handle, indent=1)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    return len(shards), total


def hy3_config(fmt):
    config = dict(HY3_CONFIG)
    if QUANTIZATION_CONFIGS[fmt]:
        config["quantization_config"] = QUANTIZATION_CONFIGS[fmt]
    return config


def make(out_dir, formats=("bf16", "fp8", "int4"), shard_gb=5.0, force=False):
    made = {}
    for fmt in formats:
        directory = os.path.join(out_dir, "hy3-%s" % fmt)
        if os.path.isdir(directory):
            if not force:
                continue
            shutil.rmtree(directory)
        made[fmt] = write_checkpoint(directory, hy3_tensors(fmt), hy3_config(fmt), int(shard_gb * 10 ** 9))
    return made


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("out_dir", nargs="?", default=DEFAULT_OUT_DIR,
                        help="where to write them (default: $HY3_SAMPLE_WEIGHTS or %(default)s)")
    parser.add_argument("--formats", default="bf16,fp8,int4")
    parser.add_argument("--shard-gb", type=float, default=5.0, help="shard size in GB (10^9 bytes), as on the hub")
    parser.add_argument("--force", action="store_true", help="rewrite checkpoints that exist")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(QUANTIZATION_CONFIGS))
    if unknown:
        parser.error("unknown format(s) %s; known: %s" % (", ".join(unknown), ", ".join(QUANTIZATION_CONFIGS)))
    for fmt, (shards, total) in sorted(make(args.out_dir, formats, args.shard_gb, args.force).items()):
        print("%s/hy3-%s: %d shards, %.1f GB (sparse)" % (args.out_dir, fmt, shards, total / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
