# -*- coding: utf-8 -*-
"""The calibration store: keys, measurement from the engine's lines, atomic and strict files."""
import json

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import calibration
from ansible_collections.hy3.fleet.plugins.module_utils.calibration import CalibrationError

GIB = 1024 ** 3
FIELDS = {"gpu_name": "NVIDIA H200", "engine_version": "0.30.0", "model": "hy3", "quantization": "fp8",
          "tensor_parallel_size": 8, "max_num_batched_tokens": 8192, "max_num_seqs": 16,
          "enforce_eager": False, "kv_cache_dtype": "auto", "dtype": "bfloat16"}
TABLE = {"engine_request": 128 * GIB, "weights": 40 * GIB, "overhead": 4 * GIB, "kv_available": 84 * GIB,
         "kv_cache_tokens": 1_000_000, "overhead_source": "model"}


def test_key_names_every_field_and_tells_settings_apart():
    key = calibration.calibration_key(FIELDS)
    assert "gpu_name=nvidia h200" in key and "enforce_eager=false" in key
    assert key != calibration.calibration_key(dict(FIELDS, max_num_seqs=32))
    # a float32 model's profile run holds twice the activations: it never borrows a bfloat16 twin's overhead;
    # the 16-bit dtypes (and auto) take the same memory and share a key
    assert key != calibration.calibration_key(dict(FIELDS, dtype="float32"))
    assert key == calibration.calibration_key(dict(FIELDS, dtype="float16")) == calibration.calibration_key(
        dict(FIELDS, dtype="auto"))


def test_a_store_from_before_the_dtype_field_still_loads_and_matches_16_bit_settings(tmp_path):
    old_fields = {k: v for k, v in FIELDS.items() if k != "dtype"}
    entry = {"key": old_fields, "overhead_bytes": 5 * GIB, "host": "gpu-1", "measured_at": "2026-11-01T00:00:00Z"}
    path = tmp_path / "store.json"
    path.write_text(json.dumps({"format": 1, "entries": {calibration.calibration_key(old_fields): entry}}))
    entries = calibration.load_store(str(path))["entries"]
    assert calibration.lookup(entries, FIELDS)["overhead_bytes"] == 5 * GIB
    assert calibration.lookup(entries, dict(FIELDS, dtype="float32")) is None


def test_the_extensible_caches_margin_is_not_learnt_as_overhead():
    """vLLM 0.34 keeps a margin of the free memory that depends on the measuring host; the entry is net of it."""
    table = dict(TABLE, warmup_margin=GIB, kv_available=83 * GIB)
    m = calibration.measure({"kv_cache_tokens": 1_000_000}, table)
    assert m["overhead_bytes"] == 128 * GIB - 40 * GIB - 83 * GIB - GIB == 4 * GIB
    with pytest.raises(CalibrationError, match="lacks max_num_seqs"):
        calibration.calibration_key({k: v for k, v in FIELDS.items() if k != "max_num_seqs"})


def test_measure_from_tokens_is_exact_to_the_budgets_own_weights():
    # The engine found 5% fewer tokens than predicted: its overhead is 5% of the KV bigger.
    m = calibration.measure({"kv_cache_tokens": 950_000, "kv_cache_gib": 79.8, "weights_gib": 40.5}, TABLE)
    assert m["status"] == "measured"
    assert m["overhead_bytes"] == 128 * GIB - 40 * GIB - int(84 * GIB * 0.95)
    assert m["predicted_kv_cache_tokens"] == 1_000_000 and m["kv_cache_tokens"] == 950_000
    assert m["kv_measured_from"] == "tokens"


def test_tokens_the_engine_counts_otherwise_give_way_to_the_gib_line():
    """A vLLM 0.20 DeepSeek-V4-Flash start printed 10,992 tokens for 13.49 GiB: scaled by the budget's bytes a token
    they would learn an overhead 13 GiB too big, and every host of the key after it would budget with that."""
    table = dict(TABLE, kv_available=int(13.43 * GIB), kv_cache_tokens=887_296)
    m = calibration.measure({"kv_cache_tokens": 10_992, "kv_cache_gib": 13.49}, table)
    assert m["kv_measured_from"] == "gib_line"
    assert m["overhead_bytes"] == 128 * GIB - 40 * GIB - int(13.49 * GIB)
    assert "counts tokens otherwise" in m["note"] and "10992" in m["note"]


@pytest.mark.parametrize("printed_gib, kv_from", [
    (0.49, "tokens"), (0.515, "tokens"), (0.531, "gib_line"), (80.0, "tokens"), (79.8 * 0.97, "gib_line")])
def test_the_token_count_stands_within_the_gib_lines_rounding(printed_gib, kv_from):
    """Tokens within 2% of the GiB line (never under 0.02 GiB) are the engine's own count: exact to a block."""
    small = dict(TABLE, kv_available=int(0.5 * GIB), kv_cache_tokens=10_000)
    table = small if printed_gib < 1 else TABLE
    tokens = 10_000 if printed_gib < 1 else 950_000
    m = calibration.measure({"kv_cache_tokens": tokens, "kv_cache_gib": printed_gib}, table)
    assert m["kv_measured_from"] == kv_from


def test_measure_falls_back_to_the_gib_line_and_says_when_nothing_was_printed():
    by_gib = calibration.measure({"kv_cache_gib": 80.0}, TABLE)
    assert by_gib["overhead_bytes"] == 8 * GIB
    none = calibration.measure({}, TABLE)
    assert none["status"] == "not_measured" and none["overhead_bytes"] is None and "model stays" in none["note"]
    explicit = calibration.measure({"kv_cache_tokens": 10}, dict(TABLE, overhead_source="explicit_kv"))
    assert explicit["status"] == "explicit_kv"
    with pytest.raises(CalibrationError, match="lacks weights"):
        calibration.measure({}, {"engine_request": 1})


def test_record_then_lookup_only_the_same_key(tmp_path):
    store = calibration.empty_store()
    m = calibration.measure({"kv_cache_tokens": 950_000}, TABLE)
    store, changed = calibration.record_entry(store, FIELDS, m, "gpu-1", "2026-12-03T07:00:00Z")
    assert changed
    again, changed_again = calibration.record_entry(store, FIELDS, m, "gpu-2", "2026-12-03T08:00:00Z")
    assert not changed_again and again is store
    assert calibration.lookup(store["entries"], FIELDS)["host"] == "gpu-1"
    assert calibration.lookup(store["entries"], dict(FIELDS, gpu_name="NVIDIA H100 80GB HBM3")) is None
    path = str(tmp_path / "sub" / "store.json")
    calibration.save_store(path, store)
    assert calibration.load_store(path) == store


def test_not_measured_is_never_recorded():
    store, changed = calibration.record_entry(calibration.empty_store(), FIELDS, {"status": "not_measured"}, "h", None)
    assert not changed and store["entries"] == {}


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    (json.dumps({"entries": {}}), "is not a format-1 store"),
    (json.dumps({"format": 1, "entries": {"x": {"overhead_bytes": "1", "key": {}}}}), "no integer overhead_bytes"),
    (json.dumps({"format": 1, "entries": {"x": {"overhead_bytes": 1, "key": FIELDS}}}), "does not match its own key"),
])
def test_a_corrupt_store_is_an_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "store.json"
    path.write_text(content)
    with pytest.raises(CalibrationError) as err:
        calibration.load_store(str(path))
    assert message in str(err.value) and str(path) in str(err.value)


def test_an_absent_store_is_empty_and_a_folder_is_refused(tmp_path):
    assert calibration.load_store(str(tmp_path / "none.json")) == calibration.empty_store()
    with pytest.raises(CalibrationError, match="is not a file"):
        calibration.load_store(str(tmp_path))


def test_further_config_keys_its_own_entries_and_reloads(tmp_path):
    """A run with a capture cap records under a key of its own, which the store reloads; the plain twin does not
    borrow it."""
    m = calibration.measure({"kv_cache_tokens": 950_000}, TABLE)
    capped = dict(FIELDS, engine_config="max_cudagraph_capture_size=8")
    store = calibration.record_entry(calibration.empty_store(), capped, m, "gpu-1", "2026-12-03T07:00:00Z")[0]
    assert calibration.lookup(store["entries"], FIELDS) is None
    assert calibration.lookup(store["entries"], capped)["host"] == "gpu-1"
    path = str(tmp_path / "store.json")
    calibration.save_store(path, store)
    assert calibration.load_store(path) == store
