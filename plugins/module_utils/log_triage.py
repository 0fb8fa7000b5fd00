# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Classify a vLLM engine log: weight loading, memory allocation or request stage failure.

The patterns are vLLM's own messages (V1 engine, ~v0.10 - v0.32) and the errors of the
libraries it loads weights with.  The first matching line in log order is the decisive
one: later lines are usually the wrappers ("Engine core initialization failed").
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

WEIGHT_LOADING = "weight_loading"
MEMORY_ALLOCATION = "memory_allocation"
REQUEST = "request"

NEXT_STEP = {
    WEIGHT_LOADING: "check the weight directory and file list (config.json, every shard of the index, "
                    "quantization matching the checkpoint)",
    MEMORY_ALLOCATION: "go back to the budget: lower tier, then max_model_len, then max_num_seqs "
                       "(or free the GPU memory other processes hold)",
    REQUEST: "check request fields, input length, timeouts (and the engine's support for this model shape)",
}

PATTERNS = (
    (WEIGHT_LOADING, (
        r"Cannot find any model weights",
        r"Invalid repository ID or local directory specified",
        r"Could not detect config format",
        r"SafetensorError",
        r"Error while deserializing header",
        r"does not match the quantization method specified",
        r"Cannot find the config file for \w+",
        r"Found multiple config files for",
        r"Unknown quantization method",
        r"is not supported for quantization method",
        r"Model architectures \[.*\] are not supported",
        r"No such file or directory: .*\.(safetensors|bin|json)",
        r"weights? .*not initialized from (the )?checkpoint",
        r"Bfloat16 is only supported on GPUs",
        r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len",
        r"incomplete metadata, file not fully covered",
    )),
    (MEMORY_ALLOCATION, (
        r"CUDA out of memory",
        r"OutOfMemoryError",
        r"CUDA error: out of memory",
        r"No available memory for the cache blocks",
        r"KV cache is needed, which is larger than the available KV cache memory",
        r"is larger than the maximum number of tokens that can be stored in KV cache",
        r"Free memory on device .* is less than desired GPU memory utilization",
        r"Cannot auto-fit max_model_len",
        r"Error in memory profiling",
        r"Invalid environment variable VLLM_CPU_KVCACHE_SPACE",
    )),
    (REQUEST, (
        r"Unsupported CPU attention configuration",
        r"maximum context length is \d+ tokens",
        r"The model `.*` does not exist",
        r"EngineDeadError",
        r"EngineCore encountered an issue",
        r"BadRequestError",
        r"\b(400|401|404|500|503) (Bad Request|Unauthorized|Not Found|Internal Server Error|Service Unavailable)",
    )),
)

_COMPILED = [(cls, re.compile("|".join("(?:%s)" % p for p in pats))) for cls, pats in PATTERNS]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

READY = re.compile(r"Application startup complete")
# The engine's own word that it will not come up, whatever the cause (the cause, when it is one of the
# classes above, is an earlier line). The API server can outlive its engine core, so the process alone
# does not tell (vllm/v1/engine/utils.py wait_for_engine_startup, vllm/v1/engine/core.py).
ENGINE_FAILED = re.compile(r"EngineCore failed to start|Engine core initialization failed"
                           r"|Did not receive response from front-end process")
KV_TOKENS = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")
KV_GIB = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
# vLLM 0.34's extensible KV cache: "Available KV cache memory" is the address range reserved before warm-up; the
# size kept is settled after it (v1/worker/extensible_kv_cache.py measure_kv_cache_blocks), on a later line.
KV_GIB_AFTER_WARMUP = re.compile(r"KV cache blocks \((-?[\d.]+) GiB\) fit within the requested")
WEIGHTS_GIB = re.compile(r"Model loading took ([\d.]+) GiB")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
CUDAGRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB")
# Model runner V2 (the default from 0.29, the only runner in 0.34) prints no estimate line of its own; the worker
# restates the estimate beside the pool it captured (v1/worker/gpu_worker.py compile_or_warm_up_model, 0.23 - 0.34).
CUDAGRAPH_POOL = re.compile(r"CUDA graph pool memory: -?[\d.]+ GiB \(actual\), ([\d.]+) GiB \(estimated\)")
GRAPH_CAPTURE = re.compile(r"Graph capturing finished in [\d.]+ secs?, took (-?[\d.]+) GiB")
ENGINE_VERSION = re.compile(r"(?:LLM engine \(v|API server version |\bversion )(\d+\.\d+[\w.+-]*)")
BATCHED_TOKENS = re.compile(r"max_num_batched_tokens=(\d+)")


def classify(text):
    """Return the triage of one log text (str)."""
    result = {"failure_class": None, "line": None, "line_number": None, "next_step": None,
              "ready": False, "kv_cache_tokens": None, "kv_cache_gib": None, "weights_gib": None,
              "max_concurrency": None, "cudagraph_estimate_gib": None, "graph_capture_gib": None,
              "engine_version": None, "max_num_batched_tokens": None, "engine_failed": None}
    for number, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).strip()
        if result["failure_class"] is None:
            for cls, pattern in _COMPILED:
                if pattern.search(line):
                    result.update(failure_class=cls, line=line, line_number=number, next_step=NEXT_STEP[cls])
                    break
        if READY.search(line):
            result["ready"] = True
        if result["engine_failed"] is None and ENGINE_FAILED.search(line):
            result["engine_failed"] = line
        _capture(result, "kv_cache_tokens", KV_TOKENS, line, lambda m: int(m.group(1).replace(",", "")))
        _capture(result, "kv_cache_gib", KV_GIB, line, lambda m: float(m.group(1)))
        _capture(result, "kv_cache_gib", KV_GIB_AFTER_WARMUP, line, lambda m: float(m.group(1)))
        _capture(result, "weights_gib", WEIGHTS_GIB, line, lambda m: float(m.group(1)))
        _capture(result, "max_concurrency", CONCURRENCY, line, lambda m: float(m.group(2)))
        _capture(result, "cudagraph_estimate_gib", CUDAGRAPH_ESTIMATE, line, lambda m: float(m.group(1)))
        _capture(result, "cudagraph_estimate_gib", CUDAGRAPH_POOL, line, lambda m: float(m.group(1)))
        _capture(result, "graph_capture_gib", GRAPH_CAPTURE, line, lambda m: float(m.group(1)))
        _capture(result, "max_num_batched_tokens", BATCHED_TOKENS, line, lambda m: int(m.group(1)))
        if result["engine_version"] is None:
            _capture(result, "engine_version", ENGINE_VERSION, line, lambda m: m.group(1).rstrip("."))
    return result


def _capture(result, key, pattern, line, convert):
    match = pattern.search(line)
    if match:
        result[key] = convert(match)


def describe(result):
    """One message naming the class, quoting the decisive line and giving the next step."""
    return "%s failure: %r (log line %s); next step: %s" % (
        result["failure_class"].replace("_", " "), result["line"], result["line_number"], result["next_step"])
