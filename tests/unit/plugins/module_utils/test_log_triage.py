# -*- coding: utf-8 -*-
"""Log triage on real vLLM log lines (vLLM's own message templates, as logged)."""
import os

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils.log_triage import (
    MEMORY_ALLOCATION, REQUEST, WEIGHT_LOADING, classify, describe)

STARTUP_OK = """\
(APIServer pid=3840) INFO 12-02 18:34:30 [model.py:2152] Using max model len 512
(Worker pid=3898) INFO 12-02 18:35:04 [default_loader.py:501] Loading weights took 0.02 seconds
(Worker pid=3898) INFO 12-02 18:35:55 [cpu_worker.py:260] Explicitly set (1.0/6.96) GiB for KV cache on node 0.
(EngineCore pid=3876) INFO 12-02 18:35:55 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 512 tokens per request: 2048.00x
INFO:     Started server process [3840]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
"""

GPU_OK = """\
(EngineCore_DP0 pid=211) INFO 10-14 09:12:01 [gpu_model_runner.py:2653] Model loading took 15.18 GiB memory and 2.640207 seconds
(EngineCore_DP0 pid=211) INFO 10-14 09:12:30 [gpu_worker.py:298] Available KV cache memory: 4.1 GiB
(EngineCore_DP0 pid=211) INFO 10-14 09:12:30 [kv_cache_utils.py:1087] GPU KV cache size: 224,353 tokens
(EngineCore_DP0 pid=211) INFO 10-14 09:12:30 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 6.85x
(APIServer pid=1) INFO:     Application startup complete.
"""

WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}"

CASES = [tuple(line.rstrip("\n").split("\t", 1)) for line in open(
    os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vllm_failure_lines.tsv"), encoding="utf-8")
    if not line.startswith("#")]


@pytest.mark.parametrize("cls, line", CASES)
def test_each_real_message_lands_in_its_class(cls, line):
    text = "(APIServer pid=1) INFO 12-02 10:00:00 [api_utils.py:286] non-default args: {}\n%s\n%s\n" % (line, WRAPPER)
    result = classify(text)
    assert result["failure_class"] == cls
    assert result["line"] == line.strip() and result["line_number"] == 2
    message = describe(result)
    assert message.startswith(cls.replace("_", " ") + " failure")
    assert result["next_step"] in message


def test_next_steps_differ_per_class():
    steps = {cls: classify(line)["next_step"] for cls, line in CASES}
    assert "weight directory and file list" in steps[WEIGHT_LOADING]
    assert "lower tier, then max_model_len, then max_num_seqs" in steps[MEMORY_ALLOCATION]
    assert "request fields, input length, timeouts" in steps[REQUEST]


def test_first_failure_wins_over_later_wrappers():
    text = CASES[3][1] + "\n" + CASES[10][1] + "\n" + WRAPPER
    assert classify(text)["failure_class"] == WEIGHT_LOADING


def test_colour_codes_are_ignored():
    result = classify("\x1b[1;36m(EngineCore pid=1)\x1b[0;0m ERROR ValueError: No available memory for the cache blocks.")
    assert result["failure_class"] == MEMORY_ALLOCATION and "\x1b" not in result["line"]


def test_healthy_cpu_startup():
    result = classify(STARTUP_OK)
    assert result["ready"] and result["failure_class"] is None
    assert result["kv_cache_tokens"] == 1048576 and result["max_concurrency"] == 2048.0


def test_healthy_gpu_startup_memory_lines():
    result = classify(GPU_OK)
    assert result["ready"] and result["kv_cache_tokens"] == 224353
    assert result["kv_cache_gib"] == 4.1 and result["weights_gib"] == 15.18 and result["max_concurrency"] == 6.85


def test_wrapper_alone_is_unclassified():
    result = classify(WRAPPER)
    assert result["failure_class"] is None and not result["ready"]


GPU_STARTUP_LOG = """\
(EngineCore_DP0 pid=311) INFO 10-02 08:11:02 [core.py:77] Initializing a V1 LLM engine (v0.22.1) with config: model='google/gemma-4-E4B', max_seq_len=32768
(APIServer pid=1) INFO 10-02 08:11:00 [scheduler.py:216] Chunked prefill is enabled with max_num_batched_tokens=8192.
(EngineCore_DP0 pid=311) INFO 10-02 08:11:20 [gpu_model_runner.py:2653] Model loading took 15.18 GiB memory and 2.640207 seconds
(EngineCore_DP0 pid=311) INFO 10-02 08:11:40 [gpu_model_runner.py:4120] Estimated CUDA graph memory: 0.79 GiB total
(EngineCore_DP0 pid=311) INFO 10-02 08:11:40 [gpu_worker.py:298] Available KV cache memory: 4.1 GiB
(EngineCore_DP0 pid=311) INFO 10-02 08:11:41 [kv_cache_utils.py:1087] GPU KV cache size: 33,584 tokens
(EngineCore_DP0 pid=311) INFO 10-02 08:11:41 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 1.02x
(EngineCore_DP0 pid=311) INFO 10-02 08:11:55 [gpu_model_runner.py:3480] Graph capturing finished in 7 secs, took 0.71 GiB
(APIServer pid=1) INFO:     Application startup complete.
"""


def test_reads_every_memory_line_of_a_gpu_startup():
    result = classify(GPU_STARTUP_LOG)
    assert result["ready"] and result["failure_class"] is None
    assert (result["weights_gib"], result["kv_cache_gib"], result["kv_cache_tokens"]) == (15.18, 4.1, 33584)
    assert result["max_concurrency"] == 1.02
    assert (result["cudagraph_estimate_gib"], result["graph_capture_gib"]) == (0.79, 0.71)
    assert result["engine_version"] == "0.22.1" and result["max_num_batched_tokens"] == 8192


def test_model_runner_v2_gives_its_graph_estimate_on_the_pool_line():
    """V2 prints no "Estimated CUDA graph memory" line; the worker's pool line carries the estimate (0.29+)."""
    log = GPU_STARTUP_LOG.replace(
        "(EngineCore_DP0 pid=311) INFO 10-02 08:11:40 [gpu_model_runner.py:4120] Estimated CUDA graph memory: 0.79 GiB total\n",
        "").replace("Application startup complete.", "Application startup complete.\n"
                    "INFO [gpu_worker.py:797] CUDA graph pool memory: 0.71 GiB (actual), 0.52 GiB (estimated), "
                    "difference: 0.19 GiB (26.8%).")
    assert "Estimated CUDA graph memory" not in log
    result = classify(log)
    assert (result["cudagraph_estimate_gib"], result["graph_capture_gib"]) == (0.52, 0.71)


def test_v0_34_reads_the_cache_kept_after_warm_up_not_the_reservation():
    """With the extensible KV cache the first GiB line is the reserved range; the size kept comes after
    warm-up and graph capture (the line's wording from vllm/v1/worker/extensible_kv_cache.py, 0.34.0)."""
    log = (
        "INFO [gpu_worker.py:797] Available KV cache memory: 61.9 GiB\n"
        "INFO [extensible_kv_cache.py:668] Memory after warmup: 9.1 GiB free, 2.0 GiB committed to the KV cache, "
        "2.9 GiB kept for transient activations (2.9 GiB allocated at peak, 1.2 GiB of torch reservation growth); "
        "3620 KV cache blocks (56.55 GiB) fit within the requested 79.19 GiB. Torch may reserve up to 20.3 GiB.\n"
        "INFO [kv_cache_utils.py:1169] GPU KV cache size: 926,720 tokens, Maximum concurrency for 32,768 tokens "
        "per request: 28.28x\n")
    result = classify(log)
    assert (result["kv_cache_gib"], result["kv_cache_tokens"], result["max_concurrency"]) == (56.55, 926720, 28.28)


def test_a_log_without_memory_lines_reads_as_unmeasured():
    result = classify("INFO: Application startup complete.\n")
    assert result["kv_cache_tokens"] is None and result["kv_cache_gib"] is None and result["weights_gib"] is None


def test_an_engine_core_that_died_ends_the_wait_even_unclassified():
    text = ("(APIServer pid=7) INFO Started engine process\n"
            "(EngineCore pid=9) ERROR Did not receive response from front-end process within 5 minutes\n")
    result = classify(text)
    assert result["failure_class"] is None and "front-end process" in result["engine_failed"]
    assert classify(STARTUP_OK)["engine_failed"] is None
