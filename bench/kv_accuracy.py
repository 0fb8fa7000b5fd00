#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""How close is the budget to what real vLLM engines printed at startup?

Reads the corpus bench/kv_corpus/cases/*.yaml (real startup logs from public sources, each with its
URL, the model's config.json numbers, the engine's settings and the numbers it printed), predicts
each case from config.json and the settings alone through the collection's own budget code, and
prints per case the predicted and the engine's KV GiB and tokens and the start verdict, then:
  * the share of cases within 5% (or 0.5 GiB) of the engine's KV GiB, the median absolute error,
    the verdicts right;
  * the same after leave-one-out calibration by key (a case borrows the overhead measured on another
    case with the same GPU, engine version, model, tp, max_num_batched_tokens, max_num_seqs,
    enforce_eager and KV dtype: what the calibration store does across a fleet);
  * with --fit, the least-squares amounts of the terms still fitted (engine_memory.COPIES: the runtime's
    and the tensor-parallel buffers'), and their leave-one-out accuracy, so a refit is judged on cases it
    did not see.

Usage: .venv/bin/python bench/kv_accuracy.py [--cases DIR] [--fit] [--json OUT]
"""
from __future__ import print_function

import argparse
import glob
import json
import os
import statistics
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.hy3.fleet.plugins.module_utils import budget, calibration, engine_memory  # noqa: E402
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile  # noqa: E402

GIB = budget.GIB
CASES = os.path.join(ROOT, "bench", "kv_corpus", "cases")
WITHIN_FRACTION, WITHIN_GIB = 0.05, 0.5
STARTED = "started"
# A start that sized its KV cache and then failed for a reason that is not memory (the budget's verdict is vLLM's KV
# check, which it passed): scored as a start.
PASSED_KV_CHECK = "failed_after_kv_check_not_memory"


def load_cases(folder):
    cases = []
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path) as handle:
            case = yaml.safe_load(handle)
        case["_path"] = path
        cases.append(case)
    return cases


def corpus_gpu_totals(folder=CASES):
    """{GPU name: the device total (GiB) its engines printed most often in the corpus}: what a case
    whose log does not print it (vLLM before ~0.11 logs no total) is taken to have."""
    seen = {}
    for case in load_cases(folder):
        gpu = case.get("gpu") or {}
        if gpu.get("name") and gpu.get("memory_gib"):
            seen.setdefault(gpu["name"], []).append(gpu["memory_gib"])
    return {name: max(set(totals), key=lambda total: (totals.count(total), total)) for name, totals in seen.items()}


_GPU_TOTALS = {}


def gpu_total_gib(case):
    """The case's device total (GiB): its own, else the corpus's for that GPU name, else None."""
    gpu = case.get("gpu") or {}
    if gpu.get("memory_gib"):
        return gpu["memory_gib"]
    if not _GPU_TOTALS:
        _GPU_TOTALS.update(corpus_gpu_totals())
    return _GPU_TOTALS.get(gpu.get("name"))


def unsupported(case):
    """Why the budget does not model this case (or None)."""
    settings = case.get("settings") or {}
    if not gpu_total_gib(case):
        return "the GPU's total memory is neither in the case nor in the corpus for %r" % (case.get("gpu") or {}).get("name")
    if (settings.get("data_parallel_size") or 1) > 1:
        return "data parallel"
    speculative = settings.get("speculative") or {}
    if speculative.get("method") in ("draft_model", "medusa", "mlp_speculator", "dflash", "dspark") or (
            speculative.get("method") == "mtp" and speculative.get("model")):
        return "a draft model of its own (its config is not in the case)"
    if cross_attention_layers(case["model"]["config"]):
        return "cross-attention to the image (Llama 3.2 Vision): its encoder cache is not modelled"
    if settings.get("kv_cache_memory_bytes") or settings.get("num_gpu_blocks_override"):
        return "KV cache size set by hand"
    if settings.get("cpu_offload_gb"):
        return "CPU weight offload (the GPU holds less than the shards; the collection configures none)"
    if settings.get("kv_transfer_config"):
        return "a KV connector (it keeps GPU buffers of its own; the collection configures none)"
    reported = case.get("engine_reported") or {}
    if reported.get("available_kv_cache_gib") is None and engine_tokens(case) is None:
        return "no KV numbers printed"
    return None


def engine_tokens(case):
    """The engine's KV tokens: its "GPU KV cache size" line, or a V0 engine's "# GPU blocks" x the block size (all its
    layers in one group: the tokens it holds)."""
    reported = case.get("engine_reported") or {}
    if reported.get("gpu_kv_cache_tokens") is not None:
        return reported["gpu_kv_cache_tokens"]
    version = engine_memory.engine_version(str(case.get("engine_version") or ""))
    blocks = reported.get("gpu_blocks", reported.get("num_gpu_blocks"))
    if blocks is not None and (version < engine_memory.V1_DEFAULT_SINCE or v0_engine(case)):
        return blocks * (case["settings"].get("block_size") or 16)
    return None


def cross_attention_layers(config):
    """Llama 3.2 Vision's decoder layers that attend to the image (text_config.cross_attention_layers)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return text.get("cross_attention_layers") or []


def tier_of(profile, settings):
    quant = profile.get("quantization") or {}
    bits = quant.get("bits") or (8 if (settings.get("quantization") or "").startswith("fp8") else 16)
    name = {16: "bf16", 8: "fp8", 4: "int4"}.get(bits, "bf16")
    dtype = settings.get("dtype") if settings.get("dtype") in budget.DTYPE_BYTES else "bfloat16"
    if dtype in ("float32", "float"):
        bits = 32
    return {"name": name, "bits": bits, "present": True, "dtype": dtype, "weights_dir": "corpus"}


def v0_engine(case):
    """Whether the start ran vLLM's V0 engine where V1 was the default (0.8 - 0.10, VLLM_USE_V1=0): the case says
    so, or its log prints the V0 engine's banner."""
    return bool(case["settings"].get("v0_engine")) or "Initializing a V0 LLM engine" in (case.get("log_excerpt") or "")


def engine_of(case, settings, entries=None):
    engine = {
        "version": str(case.get("engine_version") or ""),
        "gpu_name": case["gpu"].get("name"),
        "model_id": case["model"]["name"],
        "calibration_entries": entries,
        "max_num_batched_tokens": settings.get("max_num_batched_tokens"),
        "enforce_eager": bool(settings.get("enforce_eager")),
        "expert_parallel": bool(settings.get("enable_expert_parallel")),
    }
    if "cudagraph_counted" in settings:
        engine["cudagraph_counted"] = settings["cudagraph_counted"]
    if v0_engine(case):
        engine["v0_engine"] = True
    # the engine's environment, where the run's deployment sets variables the budget models
    engine.update(engine_memory.engine_environment(engine["version"], settings.get("environment")))
    if settings.get("moe_backend"):     # only where the engine's log (or the write-up quoting it) names it
        engine["moe_backend"] = settings["moe_backend"]
    # where the run set them, or its log or install says
    for knob in ("flashinfer_sampler", "max_cudagraph_capture_size", "async_scheduling", "enable_prefix_caching",
                 "mamba_ssm_cache_dtype", "compile_cache_warm", "mm_encoder_tp_mode", "config_format",
                 "mistral_format_files"):
        if settings.get(knob) is not None:
            engine[knob] = settings[knob]
    if case["gpu"].get("nvlink") is not None:     # the GPUs' link state, a fact of the host as NVML gives it
        engine["nvlink"] = bool(case["gpu"]["nvlink"])
    if settings.get("speculative"):
        engine.update(engine_memory.config_settings({"speculative-config": settings["speculative"]})[0])
    if settings.get("attention_backend"):      # set on the command line: the calibration key names it
        engine.update(engine_memory.config_settings({"attention-backend": settings["attention_backend"]})[0])
    for knob in ("language_model_only", "skip_mm_profiling", "disable_custom_all_reduce"):
        if settings.get(knob):
            engine[knob] = True
    if settings.get("limit_mm_per_prompt") is not None:
        engine["mm_limits"] = engine_memory.config_settings(
            {"limit-mm-per-prompt": settings["limit_mm_per_prompt"]})[0]["mm_limits"]
    return engine


def stage_weights_gib(case):
    """One rank's weights of each pipeline stage as the engine printed them ("Model loading took" per
    stage, or the per-stage "weights memory" of the profiling DEBUG line); None where a stage has none."""
    reported = case.get("engine_reported") or {}
    if reported.get("per_stage"):
        return [s.get("model_loading_gib") for s in reported["per_stage"]]
    if reported.get("per_rank_profile"):
        return [r.get("weights_gib") for r in reported["per_rank_profile"]]
    stages = case["settings"].get("pipeline_parallel_size") or 1
    if stages > 1 and reported.get("model_loading_gib"):
        # one "Model loading took" line: the first stage's (the driver worker logs it); the others modelled
        return [reported["model_loading_gib"]] + [None] * (stages - 1)
    return None


def stage_prints(case):
    """(stage, 'Available KV cache memory' GiB) the engine printed under pipeline parallelism: each stage
    sizes its own cache and logs it (v0.19 logs show only the first stage's line; a Ray run shows two)."""
    reported = case.get("engine_reported") or {}
    if reported.get("per_stage"):
        return [(s["stage"], s["available_kv_cache_gib"]) for s in reported["per_stage"]
                if s.get("available_kv_cache_gib") is not None]
    if reported.get("available_kv_cache_gib") is not None:
        return [(0, reported["available_kv_cache_gib"])]
    return []


def predict(case, entries=None, weights_from_log=False):
    settings = case["settings"]
    profile = model_profile(case["model"]["config"], source=case["id"])
    total = int(gpu_total_gib(case) * GIB)
    tp = settings.get("tensor_parallel_size") or 1
    pp = settings.get("pipeline_parallel_size") or 1
    max_model_len = settings.get("max_model_len") or profile["max_position_embeddings"]
    profile = dict(profile, max_position_embeddings=max(profile["max_position_embeddings"], max_model_len))
    tier = tier_of(profile, settings)
    if weights_from_log and pp > 1 and stage_weights_gib(case):
        tier["weight_bytes_per_stage"] = [int(w * GIB) if w else None for w in stage_weights_gib(case)]
        tier["weights_as_loaded"] = True
    elif weights_from_log and (case.get("engine_reported") or {}).get("model_loading_gib"):
        tier["weight_bytes_per_rank"] = int(case["engine_reported"]["model_loading_gib"] * GIB)
        tier["weights_as_loaded"] = True
    # The engine's own max_num_seqs when the log does not say; never retreat: this is a prediction.
    seqs = settings.get("max_num_seqs") or engine_memory.engine_defaults(
        case.get("engine_version"), case["gpu"].get("name"), total, v0_engine(case) or None)["max_num_seqs"]
    # free = total: the engine's own utilization, never lowered (the engines ran with it); what other processes held
    # on the GPU where the log shows it (engines that measure device-wide count it).
    others = int((case["gpu"].get("other_processes_gib") or 0) * GIB)
    result = budget.plan(
        profile, [tier], [{"index": i, "total": total, "free": total, "other_processes": others} for i in range(tp * pp)],
        gpu_memory_utilization=settings.get("gpu_memory_utilization"),
        kv_cache_dtype=settings.get("kv_cache_dtype") or "auto",
        max_model_len=max_model_len, min_max_model_len=max_model_len,
        max_num_seqs=seqs, min_max_num_seqs=seqs,
        tensor_parallel_size=tp, block_size=settings.get("block_size") or 16, pipeline_parallel_size=pp,
        nodes_needed_up_to=0, engine=engine_of(case, settings, entries), hold_utilization=True)
    return result


def engine_lines(case):
    reported = case.get("engine_reported") or {}
    return {"weights_gib": reported.get("model_loading_gib"), "kv_cache_gib": reported.get("available_kv_cache_gib"),
            "kv_cache_tokens": reported.get("gpu_kv_cache_tokens"),
            "cudagraph_estimate_gib": reported.get("cuda_graph_estimate_gib")}


def calibration_entry(case):
    """What the calibration store would learn from this case's engine: (fields, measurement)."""
    result = predict(case)
    if not result.get("calibration_fields") or not result.get("budget_bytes"):
        return None
    measurement = calibration.measure(engine_lines(case), result["budget_bytes"])
    if measurement["status"] != calibration.MEASURED:
        return None
    return result["calibration_fields"], measurement


def score(case, result):
    reported = case.get("engine_reported") or {}
    table = result.get("budget_bytes") or {}
    predicted_gib = (table.get("kv_available") or 0) / GIB
    engine_gib = reported.get("available_kv_cache_gib")
    row = {"id": case["id"], "predicted_gib": round(predicted_gib, 2), "engine_gib": engine_gib,
           "predicted_tokens": table.get("kv_cache_tokens"), "engine_tokens": engine_tokens(case),
           "predicted_starts": bool(result.get("starts")),
           "engine_started": case.get("outcome", STARTED) in (STARTED, PASSED_KV_CHECK)}
    if table.get("stages"):
        # Pipeline parallel: each printed stage against that stage's prediction, the worst one scored.
        pairs = [(table["stages"][stage]["kv_available"] / GIB, printed) for stage, printed in stage_prints(case)]
        if pairs:
            predicted_gib, engine_gib = max(pairs, key=lambda pair: abs(pair[0] - pair[1]))
            row.update(predicted_gib=round(predicted_gib, 2), engine_gib=engine_gib)
    if engine_gib is not None:
        error = predicted_gib - engine_gib
        row["error_gib"] = round(error, 2)
        row["within"] = abs(error) <= max(WITHIN_FRACTION * abs(engine_gib), WITHIN_GIB)
    elif row["engine_tokens"] and row["predicted_tokens"] is not None:
        # Tokens alone printed (a V0 engine's blocks, or no "Available KV cache memory" line): the same rule, the
        # GiB the token difference holds in the predicted cache (by its bytes per token where it predicts none).
        difference = row["predicted_tokens"] - row["engine_tokens"]
        error = difference / float(row["engine_tokens"])
        row["error_fraction"] = round(error, 3)
        if row["predicted_tokens"]:
            held_gib = predicted_gib * difference / float(row["predicted_tokens"])
        else:
            held_gib = difference * (table.get("kv_bytes_per_token") or 0) / GIB
        row["within"] = abs(error) <= WITHIN_FRACTION or abs(held_gib) <= WITHIN_GIB
    row["verdict_right"] = row["predicted_starts"] == row["engine_started"]
    row["tight"] = result.get("starts_certainty") == "tight"
    return row


def summary(rows, label):
    judged = [r for r in rows if "within" in r]
    errors = sorted(abs(r["error_gib"]) for r in rows if "error_gib" in r)
    within = sum(1 for r in judged if r["within"])
    verdicts = sum(1 for r in rows if r["verdict_right"])
    tight = [r for r in rows if r.get("tight")]
    return {
        "label": label, "cases": len(rows),
        "within_5pct_or_0_5gib": "%d/%d (%.0f%%)" % (within, len(judged), 100.0 * within / max(1, len(judged))),
        "median_abs_error_gib": round(statistics.median(errors), 2) if errors else None,
        "verdicts_right": "%d/%d" % (verdicts, len(rows)),
        "tight_verdicts": "%d, %d of them wrong" % (len(tight), sum(1 for r in tight if not r["verdict_right"])),
    }


def leave_one_out_calibrated(cases):
    """Each case budgeted with the store learnt from every OTHER case; only cases with a peer of the
    same key are scored (the others would use the model, as above)."""
    learnt = [(case["id"], calibration_entry(case)) for case in cases]
    rows = []
    for case in cases:
        store = calibration.empty_store()
        for cid, found in learnt:
            if cid != case["id"] and found:
                store = calibration.record_entry(store, found[0], found[1], cid, None)[0]
        result = predict(case, entries=store["entries"])
        if result["budget_bytes"]["overhead_source"] != "calibrated":
            continue
        row = score(case, result)
        row["calibrated_from"] = result["budget_bytes"]["calibrated_by"]["host"]
        rows.append(row)
    return rows


FIT_TERMS = ("runtime", "tensor_parallel", "tensor_parallel_early")
# The V1 engine (the default from v0.8) measures its non-torch growth per process; older engines measured it
# device-wide (before vLLM PR #10511), so their "non-torch" line is not a row of the fit.
PER_PROCESS_NON_TORCH_SINCE = (0, 8, 0)


def fit_features(case):
    """The fitted amounts' features of one case (1 where an amount applies: the runtime's, the tensor-parallel
    buffers' on engines that count them in full or early) and what they must add up to (GiB): one row for the
    overhead its engine took beyond the known terms (the activation peak and the sampler state, measured on
    the logs' own "torch peak memory increase" lines; the expert kernels' buffers, from their shapes; the
    CUDA-graph estimate; the PCIe boards' set amount), and, where the engine printed it, one row for its
    "non-torch" growth alone."""
    result = predict(case, weights_from_log=True)
    table = result["budget_bytes"]
    if table.get("stages"):
        return None     # pipeline parallel: the printed line is one stage's, its overhead differs by stage
    if not (case.get("engine_reported") or {}).get("model_loading_gib") or table.get("overhead_source") != "model":
        return None
    measured = calibration.measure(engine_lines(case), table)
    if measured["status"] != calibration.MEASURED:
        return None
    engine = result["engine"]
    term = engine_memory.tensor_parallel_term(result["tensor_parallel_size"], engine.get("version"),
                                              engine.get("gpu_name"), engine.get("nvlink"))
    channels_gib = engine_memory.COPIES[term] / GIB if term == "tensor_parallel_channels" else 0    # a set amount
    # the fitted runtime amount is the moved baseline's; earlier engines' measured amount is a known term
    moved = engine_memory.engine_version(engine.get("version")) >= engine_memory.BASELINE_MOVED_SINCE
    early_gib = 0 if moved else engine_memory.COPIES["runtime_early"] / GIB
    features = [1.0 if moved else 0.0] + [1.0 if term == name else 0.0 for name in FIT_TERMS[1:]]
    unified_gib = engine_memory.unified_memory_bytes(engine.get("gpu_name")) / GIB      # a set amount too
    known = (((table["cudagraph"] or 0) + table["activation_peak"] + (table["sampler_state"] or 0)
             + table["moe_workspace"] + (table.get("attention_workspace") or 0) + (table.get("cold_compile") or 0) + (table.get("encoder_profile") or 0)
             + (table.get("speculative") or 0)) / GIB
             + channels_gib + early_gib + unified_gib)
    rows = [(features, measured["overhead_bytes"] / GIB - known)]
    non_torch = ((case["engine_reported"].get("profile_breakdown") or {}).get("non_torch_increase_gib"))
    if non_torch is not None and engine_memory.engine_version(engine.get("version")) >= PER_PROCESS_NON_TORCH_SINCE:
        rows.append((features, non_torch - channels_gib - early_gib - unified_gib))
    return rows


def least_squares(rows, targets):
    """Ordinary least squares by the normal equations (a handful of columns: no numpy needed)."""
    size = len(rows[0])
    normal = [[sum(r[i] * r[j] for r in rows) for j in range(size)] + [sum(r[i] * y for r, y in zip(rows, targets))]
              for i in range(size)]
    for col in range(size):                     # Gauss-Jordan with partial pivoting
        pivot = max(range(col, size), key=lambda row: abs(normal[row][col]))
        normal[col], normal[pivot] = normal[pivot], normal[col]
        if abs(normal[col][col]) < 1e-12:
            normal[col][col] = 1e-12            # a column with no case behind it: its coefficient stays ~0
        for row in range(size):
            if row != col:
                factor = normal[row][col] / normal[col][col]
                normal[row] = [a - factor * b for a, b in zip(normal[row], normal[col])]
    return [normal[i][size] / normal[i][i] for i in range(size)]


def nnls(rows, targets):
    """Least squares with every coefficient >= 0 (active set: drop the most negative and refit)."""
    active = list(range(len(rows[0])))
    while True:
        coef = least_squares([[row[i] for i in active] for row in rows], targets)
        if min(coef) >= 0:
            full = [0.0] * len(rows[0])
            for index, value in zip(active, coef):
                full[index] = float(value)
            return full
        active.pop(coef.index(min(coef)))


HUBER_GIB = 0.5


def robust_nnls(rows, targets, rounds=20):
    """Non-negative fit with Huber weights, so a few corpus cases with odd settings (a fork, a
    mis-stated GPU) cannot drag every coefficient: residuals past HUBER_GIB count linearly."""
    weights = [1.0] * len(rows)
    coef = None
    for _round in range(rounds):
        scaled_rows = [[w ** 0.5 * x for x in row] for w, row in zip(weights, rows)]
        scaled_targets = [w ** 0.5 * y for w, y in zip(weights, targets)]
        coef = nnls(scaled_rows, scaled_targets)
        residuals = [abs(sum(a * b for a, b in zip(coef, row)) - y) for row, y in zip(rows, targets)]
        weights = [1.0 if r <= HUBER_GIB else HUBER_GIB / r for r in residuals]
    return coef


def fit_samples(cases):
    """(case id, fit_features rows) of every case the fit can use."""
    samples = [(case["id"], fit_features(case)) for case in cases]
    return [(cid, found) for cid, found in samples if found]


def fit_rows(samples, leave_out=None):
    rows = [row for cid, found in samples for row in found if cid != leave_out]
    return [row[0] for row in rows], [row[1] for row in rows]


def fit(cases):
    samples = fit_samples(cases)
    coef = robust_nnls(*fit_rows(samples))
    print("fitted on %d cases (weights from the engine's own line; the activation peak, the sampler state, the"
          " expert buffers and the CUDA-graph estimate fixed; the non-torch line of %d of them as a row of its own):"
          % (len(samples), sum(1 for cid, f in samples if len(f) > 1)))
    for name, value in zip(FIT_TERMS, coef):
        print("  %-24s %.3f GiB" % (name, value))
    errors = []
    for cid, found in samples:
        held = robust_nnls(*fit_rows(samples, leave_out=cid))
        features, target = found[0]
        errors.append(abs(sum(a * b for a, b in zip(held, features)) - target))
    print("  leave-one-out |overhead error|: median %.2f GiB, 90th percentile %.2f GiB"
          % (statistics.median(errors), sorted(errors)[int(0.9 * (len(errors) - 1))]))
    return coef


def held_out_rows(cases):
    """Each case predicted with the scales refitted WITHOUT it: the honest out-of-sample score."""
    samples = fit_samples(cases)
    rows = []
    saved = dict(engine_memory.COPIES)
    try:
        for case in cases:
            coef = robust_nnls(*fit_rows(samples, leave_out=case["id"]))
            for name, value in zip(FIT_TERMS, coef):
                engine_memory.COPIES[name] = value * GIB
            rows.append(score(case, predict(case, weights_from_log=True)))
    finally:
        engine_memory.COPIES.update(saved)
    return rows


def cudagraph_accuracy(cases):
    """The graph term against every 'Estimated CUDA graph memory' line in the corpus (printed by
    engines since about v0.19 whether or not they deduct it)."""
    errors = []
    for case in cases:
        printed = (case.get("engine_reported") or {}).get("cuda_graph_estimate_gib")
        if printed is None or case["settings"].get("enforce_eager"):
            continue
        result = predict(case, weights_from_log=True)
        profile = model_profile(case["model"]["config"], source=case["id"])
        settings = dict(result["engine"], max_num_seqs=result["max_num_seqs"],
                        kv_dtype_bytes=budget.KV_DTYPE_BYTES.get(result["kv_cache_dtype"], 2))
        modelled = engine_memory.cudagraph_bytes(profile, result["tensor_parallel_size"], settings) / GIB
        errors.append(abs(modelled - printed))
    return errors


def print_summary(s):
    print("%(label)s: %(cases)d cases; within 5%% or 0.5 GiB: %(within_5pct_or_0_5gib)s; "
          "median |error| %(median_abs_error_gib)s GiB; verdicts right %(verdicts_right)s (flagged tight: "
          "%(tight_verdicts)s)" % s)


def print_rows(rows):
    header = ("case", "pred GiB", "eng GiB", "err", "pred tok", "eng tok", "starts", "right")
    print("%-58s %9s %9s %7s %11s %11s %6s %6s" % header)
    for r in rows:
        print("%-58s %9s %9s %7s %11s %11s %6s %6s" % (
            r["id"][:58], r["predicted_gib"], r["engine_gib"], r.get("error_gib", r.get("error_fraction", "")),
            r["predicted_tokens"], r["engine_tokens"], "yes" if r["predicted_starts"] else "no",
            ("ok" if r["verdict_right"] else "WRONG") + (" tight" if r.get("tight") else "")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--json", help="write the per-case rows and summaries here")
    parser.add_argument("--fit", action="store_true", help="refit the scales of the overhead terms and print them")
    parser.add_argument("--weights-from-log", action="store_true",
                        help="use the engine's 'Model loading took' instead of the weights predicted from config.json")
    args = parser.parse_args(argv)
    cases = load_cases(args.cases)
    usable, skipped = [], []
    for case in cases:
        why = unsupported(case)
        (skipped if why else usable).append((case, why))
    if args.fit:
        fit([c for c, why in usable])
        print_summary(summary(held_out_rows([c for c, why in usable]),
                              "held out (scales refitted without the case, weights as loaded)"))
        return 0
    rows = [score(case, predict(case, weights_from_log=args.weights_from_log)) for case, why in usable]
    print_rows(rows)
    for case, why in skipped:
        print("skipped %s: %s" % (case["id"], why))
    loo = leave_one_out_calibrated([c for c, why in usable])
    weights = ("weights as the engine loaded them (what the shard headers give the budget on a host)"
               if args.weights_from_log else "weights from config.json's parameter counts alone")
    summaries = [summary(rows, "model, " + weights),
                 summary(loo, "leave-one-out calibrated by key")]
    graph_errors = cudagraph_accuracy([c for c, why in usable])
    print()
    if graph_errors:
        print("CUDA-graph estimate vs the engine's 'Estimated CUDA graph memory': %d cases; median |error| %.2f GiB, "
              "largest %.2f GiB" % (len(graph_errors), statistics.median(graph_errors), max(graph_errors)))
    for s in summaries:
        print_summary(s)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows, "calibrated_rows": loo, "summaries": summaries}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
