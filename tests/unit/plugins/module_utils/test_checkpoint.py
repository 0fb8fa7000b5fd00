# -*- coding: utf-8 -*-
"""safetensors headers, shard integrity and the per-rank weight share, on generated stand-in checkpoints."""
import json
import os
import struct

import pytest
import sample_checkpoints

from ansible_collections.hy3.fleet.plugins.module_utils import checkpoint
from ansible_collections.hy3.fleet.plugins.module_utils.checkpoint import (
    CheckpointError, rank_share, read_checkpoint, read_shard_header, summarize, tensor_split_kind)
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile


def shards_of(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))


def failure(directory):
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(directory)
    assert caught.value.status == "weight_loading"
    return caught.value


def test_intact_checkpoint_reads_every_tensor(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    read = read_checkpoint(d)
    assert read["shards"] == shards_of(d) and len(read["shards"]) > 3
    assert read["total_size"] == sum(t[3] for t in read["tensors"].values())
    shard, dtype, shape, nbytes = read["tensors"]["model.layers.1.mlp.experts.3.down_proj.weight"]
    assert (dtype, shape, nbytes) == ("BF16", [128, 128], 128 * 128 * 2) and shard in read["shards"]


def test_truncated_shard_names_the_file_and_sizes(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    victim = os.path.join(d, shards_of(d)[2])
    size = os.path.getsize(victim)
    os.truncate(victim, size - 100)
    err = failure(d)
    assert err.problem == "truncated" and err.path == victim
    assert "file is %d bytes" % (size - 100) in str(err) and "describes %d" % size in str(err)


def test_bytes_beyond_the_last_tensor_are_corrupt(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    victim = os.path.join(d, shards_of(d)[0])
    with open(victim, "ab") as handle:
        handle.write(b"\0" * 8)
    assert failure(d).problem == "corrupt_header"


def test_header_length_beyond_the_file(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    victim = os.path.join(d, shards_of(d)[-1])
    with open(victim, "wb") as handle:
        handle.write(b"\xff" * 64)                 # what the e2e test's broken copy holds
    err = failure(d)
    assert err.problem == "corrupt_header" and err.path == victim and "runs past the end of the 64-byte file" in str(err)


@pytest.mark.parametrize("payload, words", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2, 3]", "not a JSON object"),
    (json.dumps({"w": {"dtype": "BF16", "shape": [4]}}).encode(), "is not dtype/shape/data_offsets"),
    (json.dumps({"w": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 8]}}).encode(), "not dtype/shape"),
    (json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 4]}}).encode(), "hold 4 bytes, its BF16 [4] needs 8"),
])
def test_malformed_headers(tmp_path, payload, words):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(payload)) + payload + b"\0" * 8)
    with pytest.raises(CheckpointError) as caught:
        read_shard_header(str(path))
    assert caught.value.problem == "corrupt_header" and words in str(caught.value) and str(path) in str(caught.value)


def test_too_short_for_a_header(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\0" * 3)
    with pytest.raises(CheckpointError, match="3 bytes: too short"):
        read_shard_header(str(path))


def test_missing_shard(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    os.remove(os.path.join(d, shards_of(d)[1]))
    err = failure(d)
    assert err.problem == "missing_shard" and err.path.endswith(shards_of(d)[0].replace("00001", "00002"))


def edit_index(directory, change):
    path = os.path.join(directory, "model.safetensors.index.json")
    with open(path) as handle:
        index = json.load(handle)
    change(index)
    with open(path, "w") as handle:
        json.dump(index, handle)


def test_index_naming_a_tensor_the_shard_lacks(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    first, second = shards_of(d)[:2]
    edit_index(d, lambda ix: ix["weight_map"].update({"model.embed_tokens.weight": second}))
    err = failure(d)
    assert err.problem == "index_mismatch" and err.path.endswith(second)
    assert "model.embed_tokens.weight" in str(err) and "is in %s" % first in str(err)
    edit_index(d, lambda ix: ix["weight_map"].update({"model.embed_tokens.weight": first, "model.ghost": first}))
    assert "model.ghost" in str(failure(d)) and "is not in any shard" in str(failure(d))


def test_index_total_size_must_agree(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    edit_index(d, lambda ix: ix["metadata"].update({"total_size": ix["metadata"]["total_size"] + 2}))
    err = failure(d)
    assert err.problem == "index_mismatch" and "metadata.total_size" in str(err)


def test_corrupt_index(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors.index.json").write_text("{")
    assert failure(d).problem == "corrupt_index"
    (tmp_path / "ck" / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert "weight_map is missing" in str(failure(d))


def test_split_rule_by_tensor_name():
    kinds = {
        "model.embed_tokens.weight": "vocab", "lm_head.weight": "vocab", "model.norm.weight": "replicated",
        "model.layers.3.input_layernorm.weight": "replicated", "model.layers.3.mlp.router.gate.weight": "replicated",
        "model.layers.3.mlp.gate.weight": "replicated", "model.layers.3.mlp.expert_bias": "replicated",
        "model.layers.3.self_attn.kv_a_proj_with_mqa.weight": "replicated",
        "model.layers.3.self_attn.indexer.wq_b.weight": "replicated", "model.layers.3.self_attn.indexer.wk.weight_scale_inv":
        "replicated", "model.layers.3.self_attn.indexer.weights_proj.weight": "replicated",
        "model.layers.3.self_attn.k_proj.weight": "kv", "model.layers.3.self_attn.v_proj.qweight": "kv",
        "model.layers.3.self_attn.q_proj.weight": "split", "model.layers.3.mlp.experts.7.gate_proj.weight": "split",
        "model.layers.3.mlp.shared_mlp.down_proj.weight": "split", "model.layers.0.mlp.gate_proj.weight": "split",
    }
    assert {name: tensor_split_kind(name) for name in kinds} == kinds


def test_rank_share_arithmetic():
    assert rank_share("replicated", 1000, 8) == 1000
    assert rank_share("split", 1000, 8) == 125 and rank_share("split", 1001, 8) == 126
    assert rank_share("kv", 1024, 4, kv_heads=8) == 256      # 2 of 8 heads per rank
    assert rank_share("kv", 1024, 16, kv_heads=8) == 128     # tp > heads: one whole head each
    # 120832 rows are already a multiple of 64: 15104 rows per rank at tp 8
    assert rank_share("vocab", 120832 * 4096 * 2, 8, rows=120832) == 15104 * 4096 * 2
    # 100 rows pad to 128: 64 rows per rank at tp 2 (more than half of 100)
    assert rank_share("vocab", 100 * 10, 2, rows=100) == 640
    assert rank_share("split", 1000, 1) == 1000


def test_summarize_per_format(tmp_path):
    profile = model_profile(sample_checkpoints.TINY_HY3)
    out = {}
    for fmt in ("bf16", "fp8", "int4"):
        d = sample_checkpoints.write(tmp_path / fmt, fmt)
        out[fmt] = summarize(read_checkpoint(d)["tensors"], 3, tp=1, kv_heads=2)
    norms_and_bias = 3 * 2 * 32 + 2 * 4                     # q/k norms and the expert bias: not in the config count
    assert out["bf16"]["params"] == profile["params"]["total"] + norms_and_bias
    assert out["bf16"]["params"] == out["fp8"]["params"] == out["int4"]["params"]   # side tensors left out
    assert out["bf16"]["params_mtp"] == profile["params"]["mtp"] + 2 * 32 + 4
    assert out["int4"]["params_mtp"] == 0 and out["int4"]["mtp_bytes"] == 0          # GPTQ export without MTP
    assert (out["bf16"]["weight_dtype"], out["bf16"]["bits"]) == ("BF16", 16)
    assert (out["fp8"]["weight_dtype"], out["fp8"]["bits"]) == ("F8_E4M3", 8)
    assert (out["int4"]["weight_dtype"], out["int4"]["bits"]) == ("packed", 4)
    for fmt in out:                                          # tp 1: a rank holds everything
        assert out[fmt]["weight_bytes_per_rank"] == out[fmt]["data_bytes"]
        assert sum(out[fmt]["bytes_by_dtype"].values()) == out[fmt]["data_bytes"] + out[fmt]["mtp_bytes"]


def test_per_rank_share_on_a_tiny_checkpoint(tmp_path):
    d = sample_checkpoints.write(tmp_path / "ck")
    tensors = read_checkpoint(d)["tensors"]
    one = summarize(tensors, 3, tp=1, kv_heads=2)
    two = summarize(tensors, 3, tp=2, kv_heads=2)
    replicated = sum(t[3] for n, t in tensors.items() if tensor_split_kind(n) == "replicated"
                     and not n.startswith("model.layers.3."))
    vocab = 2 * 256 * 128 * 2                               # 256 rows: 128 per rank
    assert two["weight_bytes_per_rank"] == replicated + (one["data_bytes"] - replicated - vocab) // 2 + vocab // 2
    assert two["weight_bytes_per_rank"] > one["data_bytes"] // 2


def test_mtp_layers_in_every_layout_and_their_shared_copies_left_out():
    """DeepSeek-V3 numbers its MTP layer after the model's own and ships its own embedding and head, which vLLM frees;
    Qwen3-Next / Qwen3.5 keep theirs under mtp., MiMo under model.mtp_layers."""
    def tensor(rows, cols):
        return ("s", "BF16", [rows, cols], 2 * rows * cols)
    tensors = {"model.layers.0.mlp.down_proj.weight": tensor(8, 16), "model.embed_tokens.weight": tensor(32, 8),
               "model.layers.1.mlp.down_proj.weight": tensor(8, 16), "model.layers.1.embed_tokens.weight": tensor(32, 8),
               "model.layers.1.shared_head.head.weight": tensor(32, 8), "mtp.layers.0.mlp.down_proj.weight": tensor(8, 16),
               "mtp.fc.weight": tensor(8, 16), "model.mtp_layers.0.mlp.down_proj.weight": tensor(8, 16)}
    facts = summarize(tensors, 1)
    assert facts["params_mtp"] == 4 * 8 * 16 and facts["params"] == 8 * 16 + 32 * 8
    assert sum(facts["bytes_by_dtype"].values()) == facts["data_bytes"] + facts["mtp_bytes"]


def test_hy3_sized_bf16_stand_in(tmp_path):
    """The real shapes: 295B parameters plus the 3.75B MTP layer, 16 bits each, split over 8 ranks."""
    generator = sample_checkpoints.generator
    config = generator.hy3_config("bf16")
    d = str(tmp_path / "hy3-bf16")
    shards, total = generator.write_checkpoint(d, generator.hy3_tensors("bf16"), config)
    read = read_checkpoint(d)
    profile = model_profile(config)
    facts = summarize(read["tensors"], 80, tp=8, kv_heads=8)
    assert len(read["shards"]) == shards == 120 and read["total_size"] == total
    assert abs(facts["params"] - profile["params"]["total"]) < 1e-5 * profile["params"]["total"]
    assert abs(facts["params_mtp"] - profile["params"]["mtp"]) < 1e-5 * profile["params"]["mtp"]
    biases = 80 * 192                                       # F32 expert bias of 79 MoE layers and the MTP layer
    assert facts["bytes_by_dtype"] == {"BF16": 2 * (facts["params"] + facts["params_mtp"] - biases), "F32": 4 * biases}
    # replicated norms and routers make a rank hold a little more than an eighth
    assert 0 < facts["weight_bytes_per_rank"] - facts["data_bytes"] // 8 < 0.01 * facts["data_bytes"] // 8
    estimate = checkpoint.estimated_bytes_per_rank(profile, 16, 8)
    assert abs(estimate - facts["weight_bytes_per_rank"]) < 0.001 * facts["weight_bytes_per_rank"]
