# -*- coding: utf-8 -*-
"""DeepSeek sparse attention's lightning indexer in the engine's accounting (engine_memory): the prefill gather
buffer its profile run reserves, the logits it allocates beside it, and the decode logits its full CUDA graphs keep.
The model is GLM-5.2-NVFP4 as the corpus keeps it (its published config.json)."""
import os
import sys

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402  pylint: disable=wrong-import-position

MIB = 1024 * 1024
GLM52_ID = "moe-glm52-nvfp4-gb200-tp4-ep-v0260-819k"
GLM52_CASE = next(c for c in kv_accuracy.load_cases(kv_accuracy.CASES) if c["id"] == GLM52_ID)
GLM52 = model_profile(GLM52_CASE["model"]["config"])
LENGTH = 819200
ENTRY = 128 + 4          # index_head_dim fp8 values and one fp32 scale


def engine(version, **more):
    return dict({"version": version, "max_model_len": LENGTH, "max_num_batched_tokens": 8192, "max_num_seqs": 1024,
                 "gpu_name": "NVIDIA GB200", "expert_parallel": True}, **more)


@pytest.mark.parametrize("version, kept, per_call", [
    ("0.12.0", 0, 2 * ENTRY * 2 * LENGTH),           # 2 entries a token and their contiguous copy, for the call alone
    ("0.13.0", 40 * ENTRY * LENGTH, 0),              # 40 entries a token, kept by the workspace manager
    ("0.19.0", 40 * ENTRY * LENGTH, 512 * MIB),      # and a 512 MiB stand-in for the prefill's logits
    ("0.26.0", 40 * ENTRY * LENGTH, 512 * MIB),
])
def test_the_indexer_s_profile_buffers_follow_the_release(version, kept, per_call):
    assert engine_memory.indexer_workspace_parts(GLM52, engine(version)) == (kept, per_call)


def test_models_without_an_indexer_reserve_nothing_and_v4_divides_by_its_compress_ratio():
    dense_mla = dict(GLM52, mla=dict(GLM52["mla"], indexer=None))
    assert engine_memory.indexer_workspace_parts(dense_mla, engine("0.26.0")) == (0, 0)
    v4 = dict(dense_mla, compressed_attention={"ratios": [0, 4, 128], "index_head_dim": 128})
    assert engine_memory.indexer_workspace_parts(v4, engine("0.26.0"))[0] == 40 * ENTRY * LENGTH // 4


def test_the_workspace_manager_keeps_the_largest_request_once():
    """The experts and the indexer share one buffer: the indexer's line is what it asks beyond the experts."""
    settings = engine("0.26.0")
    lines = engine_memory.overhead(GLM52, 4, settings)
    experts_kept = engine_memory.moe_workspace_parts(GLM52, 4, settings)[0]
    assert lines["attention_workspace"] == 40 * ENTRY * LENGTH - experts_kept > 0
    short = engine("0.26.0", max_model_len=4096)       # 21 MiB: within the experts' buffer
    assert engine_memory.overhead(GLM52, 4, short)["attention_workspace"] == max(
        0, 40 * ENTRY * 4096 - engine_memory.moe_workspace_parts(GLM52, 4, short)[0])


def test_full_decode_graphs_keep_the_indexer_s_logits():
    sizes = engine_memory.cudagraph_capture_sizes(1024, 8192)
    assert sizes[-1] == 512
    assert engine_memory.indexer_decode_logits_bytes(GLM52, engine("0.26.0"), sizes) == 4 * 512 * LENGTH
    spec = engine("0.26.0", max_num_seqs=128, num_speculative_tokens=1, speculative_method="mtp")
    assert engine_memory.indexer_decode_logits_bytes(GLM52, spec, sizes) == 4 * 256 * LENGTH   # 2 tokens a request
    dense_mla = dict(GLM52, mla=dict(GLM52["mla"], indexer=None))
    assert engine_memory.indexer_decode_logits_bytes(dense_mla, engine("0.26.0"), sizes) == 0


def test_the_glm52_start_is_predicted_within_half_a_gib():
    """A public v0.26.0 start on 4 x GB200 at 819200 tokens: 50.62 GiB of KV cache, 1,139,456 tokens; without the
    indexer's buffers the budget read 5.9 GiB over."""
    result = kv_accuracy.predict(GLM52_CASE, weights_from_log=True)
    assert abs(result["budget_bytes"]["kv_available"] / 2 ** 30 - 50.62) <= 0.5
    assert abs(result["kv_cache_tokens"] - 1139456) <= 0.05 * 1139456
