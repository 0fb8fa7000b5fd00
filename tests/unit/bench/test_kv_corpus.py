# -*- coding: utf-8 -*-
"""The corpus of real vLLM startup logs (bench/kv_corpus) is well formed, and the budget's physics
stays close to the Hy3 engines in it (a regression guard; the full scoring is bench/kv_accuracy.py)."""
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402

CASES = kv_accuracy.load_cases(kv_accuracy.CASES)
PRINTED = ("model_loading_gib", "available_kv_cache_gib", "gpu_kv_cache_tokens", "gpu_blocks", "max_concurrency",
           "cuda_graph_estimate_gib")


def test_the_corpus_is_big_and_varied_enough():
    moe_tp4 = [c for c in CASES if c["id"].startswith("moe-") and (c["settings"].get("tensor_parallel_size") or 1) >= 4]
    assert len(CASES) >= 40 and len(moe_tp4) >= 10
    assert any("hy3" in c["id"] for c in moe_tp4)


def test_the_readme_counts_the_cases_the_corpus_holds():
    # The README's figures are read beside the corpus; a harvest that adds cases must restate them.
    with open(os.path.join(ROOT, "README.md")) as handle:
        readme = handle.read()
    counts = re.findall(r"(?:against|holds) (\d+) real vLLM startup logs", readme)
    assert counts and set(counts) == {str(len(CASES))}


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
    printed = [value for key, value in reported.items() if key.endswith(("_gib", "_tokens")) and value is not None]
    numbers = [part for value in printed for part in (value.values() if isinstance(value, dict) else [value])]
    assert all(isinstance(number, (int, float)) for number in numbers), "a printed number that is not one"


@pytest.mark.parametrize("case", [c for c in CASES if "hy3" in c["id"] and not kv_accuracy.unsupported(c)],
                         ids=lambda c: c["id"])
def test_hy3_engines_are_predicted_within_ten_percent(case):
    """Weights as the engine loaded them (what the shard headers give on a real host)."""
    result = kv_accuracy.predict(case, weights_from_log=True)
    engine_tokens = case["engine_reported"]["gpu_kv_cache_tokens"]
    assert abs(result["kv_cache_tokens"] - engine_tokens) <= 0.10 * engine_tokens


def _printed(case, pattern):
    import re
    found = re.search(pattern, case.get("log_excerpt") or "")
    return float(found.group(1)) if found else None


V0190_DEBUG = [c for c in CASES if str(c.get("engine_version")) == "0.19.0"
               and (c["settings"].get("pipeline_parallel_size") or 1) == 1
               and _printed(c, r"Estimated CUDA graph memory: ([\d.]+) GiB")
               and _printed(c, r"Total non KV cache memory: ([\d.]+)GiB")]


def test_v0190_prints_the_graph_estimate_but_does_not_deduct_it():
    """vLLM 0.19.0 (gpu_worker.determine_available_memory): available = requested - non-KV memory, the
    CUDA-graph estimate subtracted only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, default off until
    pull request 38284 (v0.20.0). Every single-stage 0.19.0 DEBUG log in the corpus shows it to 0.01 GiB."""
    assert len(V0190_DEBUG) >= 20
    for case in V0190_DEBUG:
        requested = _printed(case, r"Desired GPU memory utilization is \([\d.]+, ([\d.]+) GiB\)")
        non_kv = _printed(case, r"Total non KV cache memory: ([\d.]+)GiB")
        available = case["engine_reported"]["available_kv_cache_gib"]
        assert abs(requested - non_kv - available) <= 0.015, case["id"]
        assert not kv_accuracy.engine_memory.engine_defaults("0.19.0", case["gpu"]["name"],
                                                             int(case["gpu"]["memory_gib"] * kv_accuracy.GIB))["cudagraph_counted"]


def test_the_fit_solves_least_squares_with_non_negative_amounts():
    """bench --fit needs no numpy: an exact system is solved exactly, and an amount the data would make negative
    is held at zero and the rest refitted."""
    rows = [[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]
    assert [round(c, 9) for c in kv_accuracy.least_squares(rows, [0.5, 2.5, 4.5])] == [0.5, 2.0]
    assert [round(c, 9) for c in kv_accuracy.nnls(rows, [2.0, 1.0, 0.0])] == [1.0, 0.0]


def test_a_case_without_its_device_total_takes_the_corpus_total_for_that_gpu():
    h100 = dict(CASES[0], gpu={"name": "NVIDIA H100 80GB HBM3", "count_used": 1})
    assert kv_accuracy.gpu_total_gib(h100) == 79.19               # what 90 of the corpus's H100 engines printed
    assert kv_accuracy.unsupported(h100) is None
    unknown = dict(CASES[0], gpu={"name": "NVIDIA X9", "count_used": 1})
    assert kv_accuracy.gpu_total_gib(unknown) is None
    assert "total memory" in kv_accuracy.unsupported(unknown)


def test_a_v0_start_in_a_v1_version_and_a_non_memory_failure_are_read_as_such():
    """The V0 engine's banner in a 0.8 - 0.10 log makes the budget model V0; a start that failed after passing the KV
    check for another reason is scored as passing it."""
    case = next(c for c in CASES if "v085-v0eng" in c["id"])
    assert kv_accuracy.v0_engine(case) and kv_accuracy.predict(case, weights_from_log=True)["engine"]["v0_engine"]
    failed = next(c for c in CASES if c.get("outcome") == kv_accuracy.PASSED_KV_CHECK)
    row = kv_accuracy.score(failed, kv_accuracy.predict(failed, weights_from_log=True))
    assert row["engine_started"] and row["verdict_right"]


def test_a_pipeline_start_with_one_loading_line_gives_the_first_stage_its_weights():
    """Under pipeline parallelism the driver worker logs "Model loading took" for the first stage alone: that stage
    takes the printed weights (not the whole model's split), the others the model's own."""
    case = next(c for c in CASES if c["id"] == "dense-qwen3-32b-rtxpro6000-pp2-v0271-32k-util0426")
    assert kv_accuracy.stage_weights_gib(case) == [30.52, None]
    stages = kv_accuracy.predict(case, weights_from_log=True)["budget_bytes"]["stages"]
    assert abs(stages[0]["weights"] / kv_accuracy.GIB - 30.52) < 0.01


def test_a_v0_engine_s_blocks_give_its_tokens():
    """V0 prints "# GPU blocks" and no token count: its tokens are the blocks x the block size (one group)."""
    case = next(c for c in CASES if c["id"] == "dense-qwen25-14b-a100-40g-v073-v0eng-8k-util080")
    assert case["engine_reported"].get("gpu_kv_cache_tokens") is None
    assert kv_accuracy.engine_tokens(case) == case["engine_reported"]["num_gpu_blocks"] * 16
    v1 = dict(case, engine_version="0.10.2", log_excerpt="")
    assert kv_accuracy.engine_tokens(v1) is None       # a V1 engine's blocks span its groups: not tokens


def test_a_token_only_case_is_within_at_five_percent_or_half_a_gib_of_its_tokens():
    """The issue's rule for a case that prints tokens alone: 5% of its tokens, or the GiB the difference holds."""
    case = {"id": "t", "engine_reported": {"gpu_kv_cache_tokens": 100000}, "settings": {}}

    def row(predicted_tokens, predicted_gib, per_token=131072):
        table = {"kv_available": int(predicted_gib * kv_accuracy.GIB), "kv_cache_tokens": predicted_tokens,
                 "kv_bytes_per_token": per_token}
        return kv_accuracy.score(case, {"budget_bytes": table, "starts": True})

    assert row(104000, 12.7)["within"]                    # 4% over
    assert row(110000, 2.2)["within"]                     # 10% over, 0.2 GiB of a small cache
    assert not row(110000, 13.4)["within"]                # 10% over, 1.2 GiB
    assert not row(0, 0.0)["within"]                      # no cache predicted: scored, a miss (12.2 GiB held)


RECORDS = kv_accuracy.load_cases(os.path.join(ROOT, "bench", "kv_corpus", "records"))


def test_the_parsed_records_are_scored_apart_and_well_formed():
    assert len(RECORDS) >= 100
    for case in RECORDS:
        assert os.path.basename(case["_path"]) == case["id"] + ".yaml"
        assert case["evidence"] == "parsed_from_log" and case["source"].startswith("https://")
        assert case["gpu"]["name"].startswith("NVIDIA ") and case["gpu"]["memory_gib"] > 0
        assert kv_accuracy.engine_tokens(case) and case["engine_reported"]["available_kv_cache_gib"]
    assert not {c["id"] for c in RECORDS} & {c["id"] for c in CASES}


def test_a_record_becomes_a_case_with_its_command_line_and_a_corpus_config():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import records_from_db
    corpus = next(c for c in CASES if c["model"]["name"] == "deepseek-ai/DeepSeek-R1-0528")
    record = {"csv_metadata": {"model": "deepseek-ai/DeepSeek-R1-0528", "accelerator": "H200", "tp": 8,
                               "runtime_args": "max-model-len: 8192; tensor-parallel-size: 8; "
                                               "gpu-memory-utilization: 0.92; no-enable-prefix-caching: True"},
              "log_config": {"max_seq_len": 8192, "tensor_parallel_size": 8, "pipeline_parallel_size": 1,
                             "quantization": "fp8", "kv_cache_dtype": "auto", "vllm_version": "v0.20.0"},
              "log_memory": {"model_load_gib": 79.74, "available_kv_cache_gib": 41.24, "kv_cache_tokens": 616096,
                             "gpu_memory_utilization": 0.9}}
    other = dict(record, csv_metadata=dict(record["csv_metadata"], accelerator="MI300X"))
    cases, left_out = records_from_db.convert({"records": {"a1": record, "a2": dict(record), "b": other}}, [corpus])
    assert len(cases) == 1 and left_out == {"a run identical to another": 1, "not an NVIDIA GPU": 1}
    case = cases[0]
    assert case["id"].startswith("moe-deepseekr10528-h200-tp8-v0200-rh")
    assert case["settings"]["gpu_memory_utilization"] == 0.92           # the command line's, not the parsed 0.9
    assert case["model"]["config"] == corpus["model"]["config"]
    assert case["gpu"]["memory_gib"] == kv_accuracy.corpus_gpu_totals()["NVIDIA H200"]
    derived = records_from_db.model_configs([corpus], {"x/bf16": {"same_as": "deepseek-ai/DeepSeek-R1-0528",
                                                                  "without": ["quantization_config"],
                                                                  "config_source": "the bf16 sibling"}})
    assert "quantization_config" not in derived["x/bf16"][0] and "quantization_config" in derived[
        "deepseek-ai/deepseek-r1-0528"][0]
    # an upstream v0.11.0 build ran vLLM's image, whose FlashInfer that release samples with; Red Hat's are not known to
    assert "flashinfer_sampler" not in case["settings"]
    for build, flashinfer in (("v0.11.0", True), ("v0.11.0+rhai2", None), ("v0.11.2", None), ("v0.10.2", True)):
        early = dict(record, log_config=dict(record["log_config"], vllm_version=build))
        (converted,), left_out = records_from_db.convert({"records": {"c": early}}, [corpus])
        assert not left_out
        assert converted["settings"].get("flashinfer_sampler") is flashinfer
