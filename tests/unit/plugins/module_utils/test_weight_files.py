# -*- coding: utf-8 -*-
import json

from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights


def make_dir(tmp_path, index=None, shards=(), config=True, sizes=None):
    path = tmp_path / "w"
    path.mkdir()
    if config:
        (path / "config.json").write_text("{}")
    for shard in shards:
        (path / shard).write_bytes(b"x" * (sizes or {}).get(shard, 10))
    if index is not None:
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return str(path)


def test_missing_directory(tmp_path):
    info = inspect_weights(str(tmp_path / "nope"))
    assert not info["present"] and "does not exist" in info["reason"]


def test_no_config_json(tmp_path):
    info = inspect_weights(make_dir(tmp_path, shards=["model.safetensors"], config=False))
    assert not info["present"] and "no config.json" in info["reason"]


def test_no_weight_files(tmp_path):
    info = inspect_weights(make_dir(tmp_path))
    assert not info["present"] and "no weight files" in info["reason"]


def test_single_file_sizes(tmp_path):
    info = inspect_weights(make_dir(tmp_path, shards=["a.safetensors", "b.safetensors"], sizes={"a.safetensors": 7}))
    assert info["present"] and info["files"] == 2 and info["measured_bytes"] == 17


def test_index_total_size_beats_small_files(tmp_path):
    index = {"metadata": {"total_size": 590000000000},
             "weight_map": {"w1": "model-00001-of-00002.safetensors", "w2": "model-00002-of-00002.safetensors"}}
    info = inspect_weights(make_dir(tmp_path, index=index, shards=list(set(index["weight_map"].values()))))
    assert info["present"] and info["measured_bytes"] == 590000000000 and info["files"] == 2


def test_index_with_missing_shard(tmp_path):
    index = {"metadata": {"total_size": 10},
             "weight_map": {"w1": "model-00001-of-00002.safetensors", "w2": "model-00002-of-00002.safetensors"}}
    info = inspect_weights(make_dir(tmp_path, index=index, shards=["model-00001-of-00002.safetensors"]))
    assert not info["present"] and "model-00002-of-00002.safetensors" in info["reason"]
