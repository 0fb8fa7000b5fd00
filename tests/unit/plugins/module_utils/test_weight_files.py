# -*- coding: utf-8 -*-
"""One tier directory: status, problem and reason for every way it can be absent or damaged, and what it read."""
import json
import os

import sample_checkpoints

from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights


def test_intact_checkpoint_reports_what_it_read(tmp_path):
    info = inspect_weights(sample_checkpoints.write(tmp_path / "fp8", "fp8"), tp=2)
    assert (info["status"], info["problem"], info["reason"], info["present"]) == ("ok", None, None, True)
    assert info["profile"]["architecture"] == "HYV3ForCausalLM" and info["profile"]["quantization"]["method"] == "fp8"
    assert info["params_config"] == info["profile"]["params"] and info["guessed"] == []
    assert info["params_header"]["total"] == info["params_config"]["total"] + 200      # + q/k norms, expert bias
    assert info["files"] == len([f for f in os.listdir(tmp_path / "fp8") if f.endswith(".safetensors")])
    assert (info["bits"], info["weight_dtype"]) == (8, "F8_E4M3") and set(info["bytes_by_dtype"]) == {
        "BF16", "F8_E4M3", "F32"}
    assert info["measured_bytes"] == info["data_bytes"] + info["mtp_bytes"] == sum(info["bytes_by_dtype"].values())
    assert info["data_bytes"] // 2 < info["weight_bytes_per_rank"] < info["data_bytes"]
    assert info["tensor_parallel_size"] == 2 and info["warnings"] == []
    json.dumps(info)                                          # a module can return it as it is


def test_int4_without_mtp_layer_warns(tmp_path):
    info = inspect_weights(sample_checkpoints.write(tmp_path / "int4", "int4"))
    assert info["status"] == "ok" and info["bits"] == 4 and info["mtp_bytes_per_rank"] == 0
    assert any("MTP speculative decoding is not possible" in w for w in info["warnings"])


def test_overrides_are_merged_over_config_json(tmp_path):
    info = inspect_weights(sample_checkpoints.write(tmp_path / "bf16"), overrides={"max_position_embeddings": 1024})
    assert info["profile"]["max_position_embeddings"] == 1024


def test_absent_tiers(tmp_path):
    for path in (str(tmp_path / "nope"), str(tmp_path)):
        info = inspect_weights(path)
        assert (info["status"], info["problem"], info["present"]) == ("absent", "absent", False)
        assert info["reason"].startswith(path)


def expect(path, problem, *words):
    info = inspect_weights(str(path))
    assert (info["status"], info["problem"], info["present"]) == ("weight_loading", problem, False), info
    for word in words:
        assert word in info["reason"], info["reason"]
    return info


def test_damaged_tiers_name_the_file(tmp_path):
    (tmp_path / "file").write_text("x")
    expect(tmp_path / "file", "not_a_directory", str(tmp_path / "file"), "is a file")
    d = tmp_path / "noconfig"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"\0" * 16)
    expect(d, "no_config", str(d / "config.json"), "is missing")
    d = tmp_path / "badjson"
    d.mkdir()
    (d / "config.json").write_text("{oops")
    expect(d, "bad_config", str(d / "config.json"), "(json) is not valid JSON")
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    expect(d, "bad_config", "hidden_size is missing")
    d = tmp_path / "noweights"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(sample_checkpoints.TINY_HY3))
    info = expect(d, "no_weights", "no *.safetensors")
    assert info["profile"]["num_hidden_layers"] == 3          # what was read is returned even so
    (d / "pytorch_model.bin").write_bytes(b"\0")
    expect(d, "no_weights", "pickle weights (pytorch_model.bin)")


def test_truncated_shard_keeps_the_profile(tmp_path):
    d = sample_checkpoints.write(tmp_path / "bf16")
    shard = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))[0]
    os.truncate(os.path.join(d, shard), 100)
    info = expect(d, "truncated", shard)
    assert info["profile"]["model_type"] == "hy_v3" and info["params_config"]["total"] > 0
    assert info["params_header"] is None and info["measured_bytes"] is None


def write_in(directory, float_dtype, fmt="bf16"):
    """The tiny Hy3 checkpoint with its 16-bit tensors stored as float_dtype (an F32 export, say)."""
    gen = sample_checkpoints.generator
    config = dict(sample_checkpoints.TINY_HY3)
    tensors = [(name, float_dtype if dtype == "BF16" else dtype, shape) for name, dtype, shape in gen.hy3_tensors(fmt, config)]
    gen.write_checkpoint(str(directory), tensors, config, 200_000)
    return str(directory)


def test_an_unquantized_checkpoint_is_loaded_at_the_served_dtype(tmp_path):
    """vLLM builds the parameters in --dtype and copies the file's tensors into them."""
    bf16 = inspect_weights(write_in(tmp_path / "bf16", "BF16"), tp=2, served_float_bytes=2)
    f32 = inspect_weights(write_in(tmp_path / "f32", "F32"), tp=2, served_float_bytes=2)
    assert f32["data_bytes"] > 1.9 * bf16["data_bytes"]                                  # the files double
    assert abs(f32["weight_bytes_per_rank"] - bf16["weight_bytes_per_rank"]) < 0.01 * bf16["weight_bytes_per_rank"]
    assert f32["bits"] == bf16["bits"] == 16 and f32["weight_dtype"] == "F32"
    assert any("stored as F32 are loaded in the served dtype, 2 bytes" in w for w in f32["warnings"])
    assert not any("served dtype" in w for w in bf16["warnings"])
    as_fp32 = inspect_weights(write_in(tmp_path / "bf16-as-fp32", "BF16"), tp=2, served_float_bytes=4)
    assert as_fp32["weight_bytes_per_rank"] > 1.95 * bf16["weight_bytes_per_rank"] and as_fp32["bits"] == 32
    files_only = inspect_weights(str(tmp_path / "f32"), tp=2)                           # no served dtype: the files
    assert files_only["weight_bytes_per_rank"] > 1.9 * bf16["weight_bytes_per_rank"]


def test_a_quantized_checkpoint_keeps_its_own_dtypes(tmp_path):
    path = sample_checkpoints.write(tmp_path / "fp8", "fp8")
    assert inspect_weights(path, served_float_bytes=4)["weight_bytes_per_rank"] == inspect_weights(path)["weight_bytes_per_rank"]
