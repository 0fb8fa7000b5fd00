# -*- coding: utf-8 -*-
"""The corpus of real vLLM startup logs (bench/kv_corpus) is well formed, and the budget's physics
stays close to the Hy3 engines in it (a regression guard; the full scoring is bench/kv_accuracy.py)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402

CASES = kv_accuracy.load_cases(kv_accuracy.CASES)
PRINTED = ("model_loading_gib", "available_kv_cache_gib", "gpu_kv_cache_tokens", "max_concurrency")


def test_the_corpus_is_big_and_varied_enough():
    moe_tp4 = [c for c in CASES if c["id"].startswith("moe-") and (c["settings"].get("tensor_parallel_size") or 1) >= 4]
    assert len(CASES) >= 40 and len(moe_tp4) >= 10
    assert any("hy3" in c["id"] for c in moe_tp4)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_case_is_sourced_and_complete(case):
    assert os.path.basename(case["_path"]) == case["id"] + ".yaml"
    assert case["source"].startswith("https://")
    assert case["gpu"]["memory_gib"] > 0
    assert kv_accuracy.model_profile(case["model"]["config"], source=case["id"])["num_hidden_layers"] > 0
    settings = case["settings"]
    assert settings.get("tensor_parallel_size") and settings.get("max_model_len")
    reported = case.get("engine_reported") or {}
    assert sum(1 for key in PRINTED if reported.get(key) is not None) >= 2 or case.get("outcome") != "started"


@pytest.mark.parametrize("case", [c for c in CASES if "hy3" in c["id"] and not kv_accuracy.unsupported(c)],
                         ids=lambda c: c["id"])
def test_hy3_engines_are_predicted_within_ten_percent(case):
    """Weights as the engine loaded them (what the shard headers give on a real host)."""
    result = kv_accuracy.predict(case, weights_from_log=True)
    engine_tokens = case["engine_reported"]["gpu_kv_cache_tokens"]
    assert abs(result["kv_cache_tokens"] - engine_tokens) <= 0.10 * engine_tokens
