#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""Convert a public database of parsed vLLM startup records into kv_accuracy cases (bench/kv_corpus/records/).

The database is ashishkamra/vllm-memory-estimator's test_data/validation_db.json (RECORDS_SOURCE, commit 8b0e21d):
Red Hat AI performance-dashboard runs of vLLM and RHAIIS builds 0.11 - 0.20 on H200, B200 and MI300X, each with the
numbers its author's tool parsed from the engine's log (weights, available KV cache, tokens, concurrency) and the
command line. The raw logs are not published, so these are records, not log lines: the benchmark scores them apart
from the corpus. Only NVIDIA runs of a model whose config.json a corpus case already transcribes are converted, and a
run identical to an earlier one (same build, arguments and printed numbers) once.

Usage: .venv/bin/python bench/records_from_db.py DB.json [--out bench/kv_corpus/records]
"""
from __future__ import print_function

import argparse
import collections
import copy
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402

RECORDS_SOURCE = ("https://github.com/ashishkamra/vllm-memory-estimator/blob/8b0e21d1ec49357383758a164129515209b37e7f/"
                  "test_data/validation_db.json")
RECORDS = os.path.join(ROOT, "bench", "kv_corpus", "records")
RECORD_CONFIGS = os.path.join(ROOT, "bench", "kv_corpus", "record_configs.yaml")
ACCELERATORS = {"H200": "NVIDIA H200", "B200": "NVIDIA B200"}


def model_configs(cases, extra):
    """{lower-cased model name: (config, where it comes from)}: the first corpus case that transcribes it, then
    record_configs.yaml's own transcriptions and a corpus model's config without what a quantized sibling adds."""
    found = {}
    for case in cases:
        found.setdefault(case["model"]["name"].lower(), (case["model"]["config"],
                                                         "copied from corpus case %s" % case["id"]))
    for name, entry in (extra or {}).items():
        if "config" in entry:
            found.setdefault(name.lower(), (entry["config"], entry["config_source"]))
        elif entry.get("same_as", "").lower() in found:
            config, source = found[entry["same_as"].lower()]
            config = {k: v for k, v in config.items() if k not in entry.get("without", ())}
            found.setdefault(name.lower(), (config, "%s: %s, %s" % (entry["config_source"], entry["same_as"], source)))
    return found


def runtime_args(text):
    """The record's command line ("key: value; ...") as a dict."""
    return dict(item.split(": ", 1) for item in text.split("; ") if ": " in item)


def is_moe(config, source):
    return bool(kv_accuracy.model_profile(config, source=source).get("moe"))


def settings_of(log_config, memory, args):
    def integer(flag):
        return int(args[flag]) if flag in args else None
    return {
        "tensor_parallel_size": log_config["tensor_parallel_size"],
        "pipeline_parallel_size": log_config["pipeline_parallel_size"],
        "data_parallel_size": log_config.get("data_parallel_size") or 1,
        "enable_expert_parallel": args.get("enable-expert-parallel") == "True",
        # the command line's: the parsed value reads 0.9 on every v0.20 record given 0.92, which their KV figures
        # contradict (0.92 puts them within 1 GiB, 0.9 2.8 GiB further)
        "gpu_memory_utilization": (float(args["gpu-memory-utilization"]) if "gpu-memory-utilization" in args
                                   else memory.get("gpu_memory_utilization")),
        "max_model_len": log_config["max_seq_len"],
        "max_num_seqs": integer("max-num-seqs"), "max_num_batched_tokens": integer("max-num-batched-tokens"),
        "enforce_eager": bool(log_config.get("enforce_eager")),
        "kv_cache_dtype": log_config.get("kv_cache_dtype") or "auto",
        "dtype": log_config.get("dtype") or "bfloat16", "quantization": log_config.get("quantization"),
        "block_size": None, "speculative": None,
        "enable_prefix_caching": bool(log_config.get("enable_prefix_caching")),
    }


def upstream_image_flashinfer(build):
    """True where the record's build is an upstream release (a version without a local "+" part: vLLM's own image,
    which installs flashinfer-python, docker/Dockerfile) from before FlashInfer's sampler became opt-in
    (engine_memory.FLASHINFER_SAMPLER_OPT_IN_SINCE), so it samples with it; else None (not known: Red Hat's +rhai
    builds are not known to ship it)."""
    engine_memory = kv_accuracy.engine_memory
    if "+" not in build and engine_memory.engine_version(build) < engine_memory.FLASHINFER_SAMPLER_OPT_IN_SINCE:
        return True
    return None


def case_of(uuid, record, model_config, totals):
    meta, log_config, memory = record["csv_metadata"], record["log_config"], record["log_memory"]
    version = re.match(r"v?(\d+\.\d+\.\d+)", log_config["vllm_version"]).group(1)
    config, config_source = copy.deepcopy(model_config[0]), model_config[1]
    name = re.sub(r"[^a-z0-9]+", "", meta["model"].split("/")[-1].lower())[:28]
    kind = "moe" if is_moe(config, meta["model"]) else "dense"
    case_id = "%s-%s-%s-tp%d-v%s-rh%s" % (kind, name, meta["accelerator"].lower(), meta["tp"],
                                          version.replace(".", ""), uuid[:8])
    gpu = ACCELERATORS[meta["accelerator"]]
    settings = settings_of(log_config, memory, runtime_args(meta["runtime_args"]))
    inferred = {"gpu": "the record names the accelerator; its total is what vLLM prints for it in the corpus",
                "defaults": "max_num_seqs, max_num_batched_tokens and block_size not on the command line: the "
                            "engine's defaults"}
    if upstream_image_flashinfer(log_config["vllm_version"]):
        settings["flashinfer_sampler"] = True
        inferred["flashinfer_sampler"] = ("an upstream %s build: vLLM's image installs flashinfer-python, which this "
                                          "release's sampler takes wherever it imports" % log_config["vllm_version"])
    return {
        "id": case_id, "source": RECORDS_SOURCE, "evidence": "parsed_from_log",
        "source_note": "record %s: %s on %d x %s, vLLM %s, command line: %s" % (
            uuid, meta["model"], meta["tp"], meta["accelerator"], log_config["vllm_version"], meta["runtime_args"]),
        "engine_version": version,
        "gpu": {"name": gpu, "memory_gib": totals[gpu], "count_used": meta["tp"]},
        "model": {"name": meta["model"], "config": config, "config_source": config_source},
        "settings": settings,
        "inferred": inferred,
        "engine_reported": {
            "model_loading_gib": memory.get("model_load_gib"),
            "available_kv_cache_gib": memory.get("available_kv_cache_gib"),
            "gpu_kv_cache_tokens": memory.get("kv_cache_tokens"),
            "max_concurrency": {"tokens_per_request": memory.get("max_concurrency_tokens"),
                                "value": memory.get("max_concurrency_ratio")}},
        "outcome": kv_accuracy.STARTED,
    }


def convert(database, cases, extra_configs=None):
    """(cases, {reason: count} of the records left out)."""
    configs = model_configs(cases, extra_configs)
    totals = kv_accuracy.corpus_gpu_totals()
    converted, left_out = collections.OrderedDict(), collections.Counter()
    for uuid, record in sorted(database["records"].items()):
        meta, memory = record["csv_metadata"], record["log_memory"]
        if meta["accelerator"] not in ACCELERATORS:
            left_out["not an NVIDIA GPU"] += 1
            continue
        model_config = configs.get(meta["model"].lower())
        if not model_config:
            left_out["no corpus config for %s" % meta["model"]] += 1
            continue
        run = (meta["model"], meta["accelerator"], meta["tp"], record["log_config"]["vllm_version"],
               meta["runtime_args"], memory.get("available_kv_cache_gib"), memory.get("kv_cache_tokens"))
        if run in converted:
            left_out["a run identical to another"] += 1
            continue
        converted[run] = case_of(uuid, record, model_config, totals)
    return list(converted.values()), left_out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database")
    parser.add_argument("--out", default=RECORDS)
    args = parser.parse_args(argv)
    with open(args.database) as handle:
        database = json.load(handle)
    with open(RECORD_CONFIGS) as handle:
        extra = yaml.safe_load(handle)
    cases, left_out = convert(database, kv_accuracy.load_cases(kv_accuracy.CASES), extra)
    if not os.path.isdir(args.out):
        os.makedirs(args.out)
    for case in cases:
        with open(os.path.join(args.out, case["id"] + ".yaml"), "w") as handle:
            yaml.safe_dump(case, handle, sort_keys=False, width=120)
    print("%d cases written to %s; left out: %s" % (len(cases), args.out, dict(left_out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
