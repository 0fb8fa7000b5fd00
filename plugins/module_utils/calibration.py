# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Learn the engine's overhead from what a started engine printed, and reuse it on like hosts.

Pure functions plus load/save of one JSON file.

After a host starts, its engine printed how much memory it left for the KV cache; everything
between the budget's weights and that KV cache is the engine's measured overhead. Hosts with the
same key (what fixes that overhead: GPU model, engine version, model and tier, tp,
max_num_batched_tokens, max_num_seqs, enforce_eager, KV dtype) then budget with the measured
overhead instead of the model. An entry from another key is never used.

The store is a JSON file on the controller, fit to commit beside an inventory:
    {"format": 1, "entries": {"<key>": {"key": {...}, "overhead_bytes": N, "host": ..., ...}}}
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

STORE_FORMAT = 1
KEY_FIELDS = ("gpu_name", "engine_version", "model", "quantization", "tensor_parallel_size",
              "max_num_batched_tokens", "max_num_seqs", "enforce_eager", "kv_cache_dtype", "dtype")
# The model's activation dtype (--dtype) as far as memory goes: float32 doubles the profile run's activations,
# the 16-bit ones (and auto, which vLLM resolves to 16 bits for a float32 checkpoint too) do not differ. Entries
# recorded before the key named it were 16-bit deployments unless set otherwise, and keep matching as such.
DTYPE_KEYS = {"float32": "float32", "float": "float32"}
# What the engine's further config sets that moves its overhead (engine_memory.overhead_config_key), in the key only
# when there is any: entries recorded before the key named it, and deployments without any, keep their keys.
ENGINE_CONFIG_FIELD = "engine_config"
DTYPE_KEY_16BIT = "16bit"
GIB = 1024 ** 3

MEASURED, NOT_MEASURED, EXPLICIT_KV = "measured", "not_measured", "explicit_kv"
# Where the measured KV cache came from: the token count scaled by the budget's own bytes a token (exact to a
# block), or the "Available KV cache memory" line (two decimals).
KV_FROM_TOKENS, KV_FROM_GIB_LINE = "tokens", "gib_line"
# The token count stands for the KV memory only where the engine counts tokens as the budget does. Where both
# lines are printed and disagree by more than the GiB line's rounding allows, the engine counts otherwise (a
# vLLM 0.20 DeepSeek-V4-Flash start printed 10,992 tokens for 13.49 GiB, a 0.24 hybrid Qwen3.8 start twice the
# tokens its GiB gives at the budget's bytes a token), and scaling the tokens would learn an overhead off by the
# whole KV cache: the GiB line is used. The agreement allowed: 2% of the line, and never under 0.02 GiB.
TOKEN_AGREEMENT_FRACTION = 0.02
TOKEN_AGREEMENT_FLOOR_GIB = 0.02
# What the engine printed that a store entry keeps, for the report.
ENGINE_LINES = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "cudagraph_estimate_gib")
# The budget lines a measurement is set against.
BUDGET_LINES = ("engine_request", "weights", "overhead", "kv_available", "kv_cache_tokens")


class CalibrationError(ValueError):
    """The calibration store cannot be read or written; the message names the file."""


def _normal(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value if value is not None else "").strip().lower()


def dtype_key(dtype):
    return DTYPE_KEYS.get(str(dtype or "").strip().lower(), DTYPE_KEY_16BIT)


def calibration_key(fields):
    """One string per key; every field is required so two keys never collide by omission."""
    missing = [f for f in KEY_FIELDS if f not in fields and f != "dtype"]
    if missing:
        raise CalibrationError("calibration key lacks %s" % ", ".join(missing))
    fields = dict(fields, dtype=dtype_key(fields.get("dtype")))
    key = "|".join("%s=%s" % (f, _normal(fields[f])) for f in KEY_FIELDS)
    engine_config = _normal(fields.get(ENGINE_CONFIG_FIELD))
    return key + ("|%s=%s" % (ENGINE_CONFIG_FIELD, engine_config) if engine_config else "")


def empty_store():
    return {"format": STORE_FORMAT, "entries": {}}


def validate_store(data, path):
    if not isinstance(data, dict) or data.get("format") != STORE_FORMAT or not isinstance(data.get("entries"), dict):
        raise CalibrationError("calibration store %s is not a format-%d store (a JSON object with 'format': %d "
                               "and 'entries'); fix or remove it, it is never reset silently"
                               % (path, STORE_FORMAT, STORE_FORMAT))
    for name, entry in data["entries"].items():
        overhead = entry.get("overhead_bytes") if isinstance(entry, dict) else None
        if not isinstance(overhead, int) or isinstance(overhead, bool) or not isinstance(entry.get("key"), dict):
            raise CalibrationError("calibration store %s: entry %r has no integer overhead_bytes or no key" % (path, name))
        if calibration_key(entry["key"]) != name:
            raise CalibrationError("calibration store %s: entry %r does not match its own key fields" % (path, name))
    return data


def load_store(path):
    """The store at path; an absent file is an empty store, a corrupt one is an error."""
    if not os.path.exists(path):
        return empty_store()
    if not os.path.isfile(path):
        raise CalibrationError("calibration store %s is not a file" % path)
    try:
        with open(path) as handle:
            data = json.load(handle)
    except ValueError as err:
        raise CalibrationError("calibration store %s is not valid JSON (%s); fix or remove it, it is never "
                               "reset silently" % (path, err)) from None
    except (IOError, OSError) as err:
        raise CalibrationError("calibration store %s cannot be read: %s" % (path, err)) from None
    return validate_store(data, path)


def save_store(path, data):
    """Write atomically: a crash leaves the old store or the new one, never half of one."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if not os.path.isdir(folder):
            os.makedirs(folder)
        fd, tmp = tempfile.mkstemp(prefix=".calibration-", dir=folder)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except (IOError, OSError) as err:
        raise CalibrationError("calibration store %s cannot be written: %s" % (path, err)) from None


def lookup(entries, fields):
    """The entry for exactly this key, or None."""
    if not entries:
        return None
    return entries.get(calibration_key(fields))


def measure(engine_lines, budget_table):
    """The engine's measured breakdown beside the budget's prediction, in bytes and GiB.

    engine_lines: what the log triage read (weights_gib, kv_cache_gib, kv_cache_tokens,
    max_concurrency, cudagraph_estimate_gib, graph_capture_gib). budget_table: the budget's
    budget_bytes for the setting that was deployed.
    """
    missing = [k for k in BUDGET_LINES if k not in (budget_table or {})]
    if missing:
        raise CalibrationError("the budget table lacks %s; pass the budget_bytes the host was deployed with"
                               % ", ".join(missing))
    tokens = engine_lines.get("kv_cache_tokens")
    kv_gib = engine_lines.get("kv_cache_gib")
    record = {
        "weights_gib": engine_lines.get("weights_gib"),
        "kv_cache_gib": kv_gib,
        "kv_cache_tokens": tokens,
        "max_concurrency": engine_lines.get("max_concurrency"),
        "cudagraph_estimate_gib": engine_lines.get("cudagraph_estimate_gib"),
        "graph_capture_gib": engine_lines.get("graph_capture_gib"),
        "predicted_kv_cache_gib": round(budget_table["kv_available"] / GIB, 2),
        "predicted_kv_cache_tokens": budget_table["kv_cache_tokens"],
    }
    if budget_table.get("overhead_source") == "explicit_kv":
        record.update(status=EXPLICIT_KV, overhead_bytes=None,
                      note="the KV cache size was set by hand; there is no overhead to learn")
        return record
    kv_bytes, kv_from = _kv_bytes(kv_gib, tokens, budget_table)
    record["kv_measured_from"] = kv_from
    if kv_bytes is None:
        record.update(status=NOT_MEASURED, overhead_bytes=None,
                      note="the engine log has no KV cache memory lines (older engine or truncated log); "
                           "the budget's model stays in use")
        return record
    # Net of what depends on the measuring host's own GPUs, which the budget applies again host by host: the margin
    # vLLM 0.34's extensible KV cache kept where the budget said it would bind, and the other processes' memory an
    # engine measuring device-wide counted.
    host_bound = (budget_table.get("warmup_margin") or 0) + (budget_table.get("other_processes") or 0)
    overhead = budget_table["engine_request"] - budget_table["weights"] - kv_bytes - host_bound
    note = ("the engine took %.2f GiB beyond the budget's weights (the model said %.2f GiB)"
            % (overhead / GIB, budget_table["overhead"] / GIB))
    if tokens and kv_from == KV_FROM_GIB_LINE:
        note += ("; its %s KV tokens do not match its %.2f GiB at the budget's bytes a token (the engine counts "
                 "tokens otherwise for this model), so the GiB line was used" % (tokens, kv_gib))
    record.update(status=MEASURED, overhead_bytes=int(overhead), overhead_gib=round(overhead / GIB, 2), note=note)
    return record


def _kv_bytes(kv_gib, tokens, table):
    """(KV bytes the engine had, where they came from): its token count scaled against the budget's prediction,
    exact to a block, where it agrees with the GiB line (TOKEN_AGREEMENT_FRACTION); else the GiB line (two
    decimals); (None, None) where neither was printed."""
    gib_bytes = int(kv_gib * GIB) if kv_gib is not None else None
    if tokens and table.get("kv_cache_tokens") and table.get("kv_available", 0) > 0:
        scaled = int(table["kv_available"] * (float(tokens) / table["kv_cache_tokens"]))
        allowed = max(TOKEN_AGREEMENT_FLOOR_GIB, TOKEN_AGREEMENT_FRACTION * abs(kv_gib or 0)) * GIB
        if gib_bytes is None or abs(scaled - gib_bytes) <= allowed:
            return scaled, KV_FROM_TOKENS
    if gib_bytes is not None:
        return gib_bytes, KV_FROM_GIB_LINE
    return None, None


def record_entry(data, fields, measurement, host, measured_at):
    """The store with this measurement recorded under its key; (store, changed)."""
    if measurement.get("status") != MEASURED:
        return data, False
    name = calibration_key(fields)
    key = {f: fields.get(f) for f in KEY_FIELDS + (ENGINE_CONFIG_FIELD,) if f in KEY_FIELDS or fields.get(f)}
    entry = {"key": key, "overhead_bytes": int(measurement["overhead_bytes"]),
             "host": host, "measured_at": measured_at,
             "engine": {k: measurement.get(k) for k in ENGINE_LINES}}
    old = data["entries"].get(name)
    if old and old.get("overhead_bytes") == entry["overhead_bytes"]:
        return data, False
    entries = dict(data["entries"])
    entries[name] = entry
    return dict(data, entries=entries), True
