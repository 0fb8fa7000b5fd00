# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""One tier's weight directory: what the checkpoint says about itself, and whether it is whole.

status is one of
  ok              config.json read, every shard intact and consistent with the index
  absent          no checkpoint here (no directory, or a directory without config.json or weights):
                  the tier is simply not offered on this host
  weight_loading  a checkpoint the engine would fail to load: ``problem`` says how (not_a_directory,
                  no_config, bad_config, bad_override (the model_config override, not the file),
                  no_weights, missing_shard, truncated, corrupt_header,
                  corrupt_index, index_mismatch, unreadable) and ``reason`` names the file
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.hy3.fleet.plugins.module_utils import checkpoint
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import (
    ModelConfigError, read_model_profile, with_preprocessor_pixels)

PICKLE_SUFFIXES = (".bin", ".pt")


def inspect_weights(path, tp=1, overrides=None, served_float_bytes=None):
    """Everything read from one weight directory, as a dict safe to return from a module.

    overrides: config.json fields merged over the file's before the profile is read.
    tp: tensor-parallel size the per-rank weight bytes are computed for.
    served_float_bytes: bytes a parameter of the dtype the engine serves in (2 for bfloat16, float16 and auto,
    4 for float32): an unquantized checkpoint's floating tensors are loaded at that size, whatever the files hold.
    """
    info = {"path": path, "status": checkpoint.OK, "problem": None, "reason": None, "present": False,
            "profile": None, "params_config": None, "params_header": None, "bytes_by_dtype": None,
            "data_bytes": None, "mtp_bytes": None, "measured_bytes": None, "files": 0, "bits": None,
            "weight_dtype": None, "weight_bytes_per_rank": None, "mtp_bytes_per_rank": None, "tower_bytes_per_rank": None,
            "tower_bytes": None, "mistral_format_files": False,
            "tensor_parallel_size": tp, "guessed": [], "warnings": []}
    try:
        _read(path, tp, overrides or {}, info, served_float_bytes)
    except checkpoint.CheckpointError as err:
        info.update(status=err.status, problem=err.problem, reason=str(err))
    except ModelConfigError as err:
        info.update(status=checkpoint.WEIGHT_LOADING, problem=err.status, reason=str(err))
    except (IOError, OSError) as err:
        info.update(status=checkpoint.WEIGHT_LOADING, problem="unreadable",
                    reason="%s: %s" % (getattr(err, "filename", None) or path, getattr(err, "strerror", None) or err))
    info["present"] = info["status"] == checkpoint.OK
    return info


def _absent(path, why):
    err = checkpoint.CheckpointError(path, "absent", why)
    err.status = checkpoint.ABSENT
    return err


def _json_beside(path, names, name):
    """A small JSON file of the checkpoint (a preprocessor's), parsed; None when absent. Unreadable or invalid:
    a ModelConfigError naming it (the budget would otherwise size the encoder from the stock caps unsaid)."""
    if name not in names:
        return None
    try:
        with open(os.path.join(path, name)) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError) as err:
        raise ModelConfigError(os.path.join(path, name), "(file)", "cannot be read as JSON: %s" % err) from err


def _read(path, tp, overrides, info, served_float_bytes):
    if not path or not os.path.exists(path):
        raise _absent(path, "weight directory does not exist")
    if not os.path.isdir(path):
        raise checkpoint.CheckpointError(path, "not_a_directory", "is a file, not a weight directory")
    names = os.listdir(path)
    weights = [n for n in names if n.endswith(".safetensors") or n.endswith(PICKLE_SUFFIXES)]
    # Mistral's own format beside config.json, which vLLM's --config-format auto may read instead
    # (engine_memory.reads_mistral_format)
    info["mistral_format_files"] = "params.json" in names and any(checkpoint.is_mistral_consolidated(n) for n in names)
    if "config.json" not in names:
        if not weights:
            raise _absent(path, "no config.json and no weight files")
        raise checkpoint.CheckpointError(os.path.join(path, "config.json"), "no_config",
                                         "is missing beside %d weight file(s)" % len(weights))
    profile = read_model_profile(os.path.join(path, "config.json"), overrides)
    if (profile.get("vision") or {}).get("family"):
        profile["vision"] = with_preprocessor_pixels(profile["vision"], *(
            _json_beside(path, names, name) for name in ("preprocessor_config.json", "video_preprocessor_config.json")))
    info.update(profile=profile, params_config=profile["params"], guessed=profile["guessed"],
                warnings=list(profile["warnings"]))
    if not any(n.endswith(".safetensors") for n in weights):
        if weights:
            raise checkpoint.CheckpointError(path, "no_weights", "holds only pickle weights (%s); the budget reads "
                                             "safetensors headers only" % ", ".join(sorted(weights)[:3]))
        raise checkpoint.CheckpointError(path, "no_weights", "no *.safetensors weight files beside config.json")
    read = checkpoint.read_checkpoint(path)
    quant = profile["quantization"] or {}
    packed_bits = quant["bits"] if quant.get("bits", 16) < 16 else 4     # weights per int32 word: 32 / bits
    served = None if quant else served_float_bytes        # a quantized checkpoint keeps its own dtypes
    facts = checkpoint.summarize(read["tensors"], profile["num_hidden_layers"], tp,
                                 profile["num_key_value_heads"], packed_bits, served)
    info.update(
        files=len(read["shards"]), params_header={"total": facts["params"], "mtp": facts["params_mtp"]},
        bytes_by_dtype=facts["bytes_by_dtype"], data_bytes=facts["data_bytes"], mtp_bytes=facts["mtp_bytes"],
        measured_bytes=facts["data_bytes"] + facts["mtp_bytes"], weight_dtype=facts["weight_dtype"],
        bits=quant.get("bits") or facts["bits"], weight_bytes_per_rank=facts["weight_bytes_per_rank"],
        mtp_bytes_per_rank=facts["mtp_bytes_per_rank"], tower_bytes_per_rank=facts["tower_bytes_per_rank"],
        tower_bytes=facts["tower_bytes"])
    recast = _recast_dtypes(facts, served)
    if recast:
        info["warnings"].append("weights stored as %s are loaded in the served dtype, %d bytes a parameter: the "
                                "budget counts them at that size, not the files'" % (" and ".join(recast), served))
    if quant.get("bits") and facts["bits"] and quant["bits"] != facts["bits"]:
        info["warnings"].append("quantization_config says %d bits but the linear weights are stored as %s"
                                % (quant["bits"], facts["weight_dtype"]))
    if profile["num_nextn_predict_layers"] and not facts["params_mtp"]:
        info["warnings"].append("config.json names %d MTP layer(s) but the shards hold none: "
                                "MTP speculative decoding is not possible with this checkpoint"
                                % profile["num_nextn_predict_layers"])


def _recast_dtypes(facts, served_float_bytes):
    """The floating dtypes holding at least 1% of the files' bytes that the engine casts to another size."""
    if not served_float_bytes:
        return []
    by_dtype, total = facts["bytes_by_dtype"] or {}, max(1, facts["data_bytes"] or 0)
    return sorted(dtype for dtype, nbytes in by_dtype.items() if dtype in checkpoint.FLOAT_DTYPES
                  and checkpoint.DTYPE_BITS[dtype] != served_float_bytes * 8 and nbytes >= total // 100)
