# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-host memory budget for a vLLM deployment: pure arithmetic, no I/O.

The model follows how vLLM really sizes its KV cache (V1 engine):
  * it asks for ``gpu_memory_utilization x TOTAL`` bytes per GPU and refuses to
    start when FREE memory is below that, so the utilization is lowered to what
    is free (rounded down to 0.01);
  * KV bytes = that request - weights per tensor-parallel rank - runtime overhead;
  * KV bytes per token = 2 x layers x max(1, kv_heads // tp) x head_dim x dtype
    bytes (MLA: layers x latent dim x dtype bytes, not split by tp);
  * reported KV tokens = whole blocks of ``block_size`` tokens.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

GIB = 1024 ** 3

# Bits per weight of each quantization tier, highest first.
TIER_BITS = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}

# vLLM --quantization value to pass for each tier when the user gives none
# (None: vLLM reads quant_method from the checkpoint's config.json).
TIER_DEFAULT_QUANTIZATION = {"bf16": None, "fp16": None, "fp8": "fp8", "int8": None, "int4": None}

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": 2}
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}

HY3_PROFILE = {
    "name": "Hy3",
    "total_params_b": 295.0,
    "active_params_b": 21.0,
    "mtp_params_b": 3.8,
    "num_layers": 80,
    "num_attention_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 128,
    "max_context": 262144,
    "mla_latent_dim": 0,
}


class BudgetInputError(ValueError):
    """Input that cannot describe a real deployment; the message says which."""


def gib(nbytes):
    return round(nbytes / GIB, 2)


def _require(cond, message):
    if not cond:
        raise BudgetInputError(message)


def validate_profile(profile):
    for key in ("total_params_b", "num_layers", "num_kv_heads", "head_dim", "max_context"):
        _require(profile.get(key) is not None and profile[key] > 0,
                 "model profile: %s must be a positive number, got %r" % (key, profile.get(key)))
    for key in ("active_params_b", "mtp_params_b", "mla_latent_dim"):
        _require((profile.get(key) or 0) >= 0,
                 "model profile: %s must not be negative, got %r" % (key, profile.get(key)))
    _require((profile.get("active_params_b") or 0) <= profile["total_params_b"],
             "model profile: active_params_b (%s) cannot exceed total_params_b (%s)"
             % (profile.get("active_params_b"), profile["total_params_b"]))


def kv_bytes_per_token(profile, tp, kv_dtype_bytes):
    """KV cache bytes one token occupies on one tensor-parallel rank."""
    if profile.get("mla_latent_dim"):
        return profile["num_layers"] * profile["mla_latent_dim"] * kv_dtype_bytes
    heads_per_rank = max(1, profile["num_kv_heads"] // tp)
    return 2 * profile["num_layers"] * heads_per_rank * profile["head_dim"] * kv_dtype_bytes


def weight_params_b(profile, load_mtp):
    """Parameters (billions) that must be resident: every expert, not only the active ones."""
    mtp = (profile.get("mtp_params_b") or 0) if load_mtp else 0
    return profile["total_params_b"] + mtp


def nominal_weight_bytes(params_b, bits):
    return int(params_b * 1e9 * bits / 8)


def check_tensor_parallel(profile, tp, gpu_count):
    _require(gpu_count > 0, "no GPUs in the facts: nothing to budget")
    _require(tp >= 1, "tensor_parallel_size must be at least 1, got %s" % tp)
    _require(tp <= gpu_count, "tensor_parallel_size %d is more than the %d GPU(s) on this host" % (tp, gpu_count))
    kv_heads = profile["num_kv_heads"]
    if not profile.get("mla_latent_dim"):
        _require(kv_heads % tp == 0 or tp % kv_heads == 0,
                 "tensor_parallel_size %d does not divide the %d KV heads (nor is it a multiple of them); "
                 "pick a divisor of %d" % (tp, kv_heads, kv_heads))
    heads = profile.get("num_attention_heads")
    if heads:
        _require(heads % tp == 0, "tensor_parallel_size %d does not divide the %d attention heads" % (tp, heads))


def effective_utilization(gpus, desired):
    """Highest utilization <= desired that every GPU can satisfy from its FREE memory.

    vLLM requests ceil(total x utilization) bytes and refuses to start when free
    memory is smaller.  Returns (utilization, reason or None).
    """
    util = desired
    tightest = None
    for gpu in gpus:
        fit = math.floor(gpu["free"] / gpu["total"] * 100) / 100
        while fit > 0 and math.ceil(gpu["total"] * fit) > gpu["free"]:
            fit = round(fit - 0.01, 2)
        if fit < util:
            util, tightest = fit, gpu
    if tightest is None:
        return util, None
    return util, ("GPU %s has %.2f of %.2f GiB free; vLLM refuses to start when free memory is below "
                  "gpu_memory_utilization x total, so utilization is lowered from %.2f to %.2f"
                  % (tightest.get("index", "?"), tightest["free"] / GIB, tightest["total"] / GIB, desired, util))


def evaluate(state, ctx):
    """Budget table for one (tier, max_model_len, max_num_seqs) state, all in bytes."""
    tier = state["tier"]
    tp = ctx["tp"]
    nominal = nominal_weight_bytes(ctx["params_b"], tier["bits"]) // tp
    measured = (tier["measured_bytes"] // tp) if tier.get("measured_bytes") else None
    weights = max(nominal, measured or 0)
    kv_bytes = DTYPE_BYTES.get(tier.get("dtype") or "bfloat16", 2)
    kv_bytes = KV_DTYPE_BYTES.get(ctx["kv_cache_dtype"], kv_bytes)
    per_token = kv_bytes_per_token(ctx["profile"], tp, kv_bytes)
    available = ctx["engine_bytes"] - weights - ctx["overhead_bytes"]
    needed = state["max_model_len"] * state["max_num_seqs"] * per_token
    block_bytes = per_token * ctx["block_size"]
    tokens = (available // block_bytes) * ctx["block_size"] if available > 0 else 0
    return {
        "free": ctx["free_min"],
        "engine_request": ctx["engine_bytes"],
        "weights_nominal": nominal,
        "weights_measured": measured,
        "weights": weights,
        "overhead": ctx["overhead_bytes"],
        "kv_available": available,
        "kv_needed": needed,
        "headroom": available - needed,
        "kv_bytes_per_token": per_token,
        "kv_cache_tokens": tokens,
    }


def _fits(table):
    return table["kv_available"] > 0 and table["headroom"] >= 0


def _round_down(value, multiple):
    """value rounded down to a multiple; a value below one multiple is kept (short beats none)."""
    return (value // multiple) * multiple if value >= multiple else value


def _step(action, state, table):
    return {
        "action": action,
        "quantization": state["tier"]["name"],
        "max_model_len": state["max_model_len"],
        "max_num_seqs": state["max_num_seqs"],
        "fits": _fits(table),
        "table_gib": table_in_gib(table),
    }


def table_in_gib(table):
    out = {}
    for key, value in table.items():
        if key in ("kv_bytes_per_token", "kv_cache_tokens"):
            out[key] = value
        else:
            out[key] = gib(value) if value is not None else None
    return out


def plan(profile, tiers, gpus, gpu_memory_utilization=0.9, runtime_overhead_gib=4.0,
         kv_cache_dtype="auto", max_model_len=None, min_max_model_len=None,
         max_num_seqs=16, min_max_num_seqs=1, tensor_parallel_size=None,
         block_size=16, max_model_len_multiple=1024, load_mtp=False):
    """Choose quantization, max_model_len and max_num_seqs that fit this host.

    tiers: dicts with name, present (weight files exist), measured_bytes (or None),
    dtype, quantization, weights_dir.  gpus: dicts with index, total, free (bytes;
    free already includes memory our own engine holds and would give back).
    Retreat order when the KV need exceeds what is left, one variable at a time:
    (1) next lower tier with weight files, (2) max_model_len down to the minimum,
    (3) max_num_seqs down to the minimum.
    """
    validate_profile(profile)
    _require(0 < gpu_memory_utilization <= 1,
             "gpu_memory_utilization must be in (0, 1], got %s" % gpu_memory_utilization)
    _require(runtime_overhead_gib >= 0, "runtime_overhead_gib must not be negative, got %s" % runtime_overhead_gib)
    _require(kv_cache_dtype == "auto" or kv_cache_dtype in KV_DTYPE_BYTES,
             "unknown kv_cache_dtype %r; use auto, %s" % (kv_cache_dtype, ", ".join(sorted(KV_DTYPE_BYTES))))
    _require(block_size > 0 and max_model_len_multiple > 0, "block_size and max_model_len_multiple must be positive")
    max_model_len = max_model_len or profile["max_context"]
    min_max_model_len = min_max_model_len or min(4096, max_model_len)
    _require(max_model_len > 0 and min_max_model_len > 0, "max_model_len values must be positive")
    _require(min_max_model_len <= max_model_len,
             "min_max_model_len %d is above max_model_len %d" % (min_max_model_len, max_model_len))
    _require(max_model_len <= profile["max_context"],
             "max_model_len %d is above the model's context %d (vLLM refuses it)" % (max_model_len, profile["max_context"]))
    _require(1 <= min_max_num_seqs <= max_num_seqs,
             "need 1 <= min_max_num_seqs (%s) <= max_num_seqs (%s)" % (min_max_num_seqs, max_num_seqs))
    _require(tiers, "no quantization tiers on offer")
    for tier in tiers:
        _require(tier["name"] in TIER_BITS,
                 "unknown quantization tier %r; known tiers: %s" % (tier["name"], ", ".join(TIER_BITS)))
    for gpu in gpus:
        total, free = gpu.get("total"), gpu.get("free")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (total, free))
        _require(numbers and total > 0 and 0 <= free <= total,
                 "GPU %s: memory figures are not usable (total %r, free %r)"
                 % (gpu.get("index", "?"), gpu.get("total"), gpu.get("free")))

    tp = len(gpus) if tensor_parallel_size is None else tensor_parallel_size
    check_tensor_parallel(profile, tp, len(gpus))
    used = gpus[:tp]
    util, util_reason = effective_utilization(used, gpu_memory_utilization)

    offered = sorted((dict(t, bits=TIER_BITS[t["name"]]) for t in tiers), key=lambda t: -t["bits"])
    present = [t for t in offered if t.get("present")]
    skipped = [{"quantization": t["name"], "reason": t.get("reason") or "no weight files"}
               for t in offered if not t.get("present")]
    result = {
        "tensor_parallel_size": tp,
        "gpu_memory_utilization": util,
        "gpu_memory_utilization_requested": gpu_memory_utilization,
        "utilization_note": util_reason,
        "kv_cache_dtype": kv_cache_dtype,
        "free_gib_per_gpu": [gib(g["free"]) for g in used],
        "skipped_tiers": skipped,
        "active_params_b": profile.get("active_params_b"),
        "total_params_b": profile["total_params_b"],
        "mtp_params_b": profile.get("mtp_params_b"),
        "ladder": [],
    }
    if not present:
        raise BudgetInputError("no quantization tier has weight files on this host: %s"
                               % "; ".join("%s: %s" % (s["quantization"], s["reason"]) for s in skipped))
    if util <= 0:
        return _cannot_hold(result, None, None, "no usable free memory: %s" % util_reason)

    ctx = {
        "profile": profile, "tp": tp, "kv_cache_dtype": kv_cache_dtype, "block_size": block_size,
        "params_b": weight_params_b(profile, load_mtp),
        "free_min": min(g["free"] for g in used),
        "engine_bytes": min(int(math.ceil(g["total"] * util)) for g in used),
        "overhead_bytes": int(runtime_overhead_gib * GIB),
    }
    state = {"tier": present[0], "max_model_len": max_model_len, "max_num_seqs": max_num_seqs}
    table = evaluate(state, ctx)
    ladder = result["ladder"]
    ladder.append(_step("initial", state, table))

    # (1) lower quantization tiers, one at a time
    for tier in present[1:]:
        if _fits(table):
            break
        state = dict(state, tier=tier)
        table = evaluate(state, ctx)
        ladder.append(_step("lower quantization to %s" % tier["name"], state, table))

    # (2) lower max_model_len: the largest multiple that fits, never below the minimum
    if not _fits(table):
        per_seq = state["max_num_seqs"] * table["kv_bytes_per_token"]
        fit_len = _round_down(max(table["kv_available"], 0) // per_seq, max_model_len_multiple)
        new_len = max(min_max_model_len, min(fit_len, state["max_model_len"]))
        if new_len != state["max_model_len"]:
            state = dict(state, max_model_len=new_len)
            table = evaluate(state, ctx)
            ladder.append(_step("lower max_model_len to %d" % new_len, state, table))

    # (3) lower max_num_seqs, never below the minimum
    if not _fits(table):
        per_seq = state["max_model_len"] * table["kv_bytes_per_token"]
        fit_seqs = max(table["kv_available"], 0) // per_seq
        new_seqs = max(min_max_num_seqs, min(fit_seqs, state["max_num_seqs"]))
        if new_seqs != state["max_num_seqs"]:
            state = dict(state, max_num_seqs=new_seqs)
            table = evaluate(state, ctx)
            ladder.append(_step("lower max_num_seqs to %d" % new_seqs, state, table))

    if not _fits(table):
        why = ("weights (%.2f GiB per GPU) and overhead (%.2f GiB) leave %.2f GiB for the KV cache, but the "
               "smallest setting (%s, max_model_len %d, max_num_seqs %d) needs %.2f GiB"
               % (table["weights"] / GIB, table["overhead"] / GIB, table["kv_available"] / GIB,
                  state["tier"]["name"], state["max_model_len"], state["max_num_seqs"], table["kv_needed"] / GIB))
        return _cannot_hold(result, state, table, why)

    tier = state["tier"]
    steps = len(ladder) - 1
    result.update({
        "fits": True,
        "verdict": "fits" if steps == 0 else "retreated %d step%s" % (steps, "" if steps == 1 else "s"),
        "steps_retreated": steps,
        "quantization": tier["name"],
        "vllm_quantization": tier.get("quantization") or TIER_DEFAULT_QUANTIZATION[tier["name"]],
        "dtype": tier.get("dtype") or "bfloat16",
        "weights_dir": tier.get("weights_dir"),
        "max_model_len": state["max_model_len"],
        "max_num_seqs": state["max_num_seqs"],
        "budget_gib": table_in_gib(table),
        "budget_bytes": table,
        "kv_cache_tokens": table["kv_cache_tokens"],
        "max_concurrency": round(table["kv_cache_tokens"]
                                 / (math.ceil(state["max_model_len"] / block_size) * block_size), 2),
        "shortfall_gib": 0.0,
    })
    return result


def _cannot_hold(result, state, table, why):
    shortfall = -table["headroom"] if table else None
    result.update({
        "fits": False,
        "verdict": "cannot hold",
        "steps_retreated": max(len(result["ladder"]) - 1, 0),
        "quantization": state["tier"]["name"] if state else None,
        "max_model_len": state["max_model_len"] if state else None,
        "max_num_seqs": state["max_num_seqs"] if state else None,
        "budget_gib": table_in_gib(table) if table else None,
        "budget_bytes": table,
        "kv_cache_tokens": table["kv_cache_tokens"] if table else 0,
        "shortfall_gib": gib(shortfall) if shortfall is not None else None,
        "reason": "this host cannot hold the model: %s%s" % (
            why, "; short by %.2f GiB per GPU" % (shortfall / GIB) if shortfall is not None else ""),
    })
    return result
