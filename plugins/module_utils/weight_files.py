# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Look at a checkpoint directory: are the weight files there, and how big are they."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os

INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt")


def inspect_weights(path):
    """Return {present, measured_bytes, files, reason} for one weight directory.

    present is True only when config.json exists and every shard is there (all
    shards named in the index, or at least one weight file without an index).
    measured_bytes is the larger of the index's total_size and the files' sizes.
    """
    info = {"path": path, "present": False, "measured_bytes": None, "files": 0, "reason": None}
    if not path or not os.path.isdir(path):
        info["reason"] = "weight directory %s does not exist" % path
        return info
    if not os.path.isfile(os.path.join(path, "config.json")):
        info["reason"] = "no config.json in %s" % path
        return info
    index_total, shards = _read_index(path)
    if shards is None:
        files = sorted(set(f for pattern in WEIGHT_GLOBS for f in glob.glob(os.path.join(path, pattern))))
    else:
        files = [os.path.join(path, s) for s in shards]
        missing = [s for s, f in zip(shards, files) if not os.path.isfile(f)]
        if missing:
            info["reason"] = "%d shard(s) named in the index are missing from %s: %s" % (
                len(missing), path, ", ".join(missing[:5]))
            return info
    if not files:
        info["reason"] = "no weight files (*.safetensors, *.bin) in %s" % path
        return info
    on_disk = sum(os.path.getsize(f) for f in files)
    info.update(present=True, files=len(files), measured_bytes=max(on_disk, index_total or 0))
    return info


def _read_index(path):
    for name in INDEX_NAMES:
        index_path = os.path.join(path, name)
        if os.path.isfile(index_path):
            try:
                with open(index_path) as handle:
                    index = json.load(handle)
            except (OSError, ValueError):
                return None, None
            total = (index.get("metadata") or {}).get("total_size")
            shards = sorted(set((index.get("weight_map") or {}).values()))
            return (int(total) if total else None), shards
    return None, None
