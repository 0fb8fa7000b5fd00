#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""How long the budget takes to read a Hy3-sized checkpoint: config.json, index and every shard header.

    .venv/bin/python bench/bench_checkpoint.py [--shard-gb 1.5] [--runs 5] [--formats bf16,fp8,int4]

Writes sparse stand-ins (scripts/make_sample_checkpoints.py: real tensor names and shapes, ~600 GB
apparent size for bf16, a few tens of MB on disk) into a temporary directory, then times
weight_files.inspect_weights on each (integrity of every shard, header parameter counts, bytes by
dtype, per-rank share at tp 8) and prints the median and the slowest of --runs runs.
"""

from __future__ import absolute_import, division, print_function

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_collection():
    """Expose the checkout as ansible_collections.hy3.fleet (as tests/conftest.py does)."""
    base = tempfile.mkdtemp(prefix="hy3-bench-collections-")
    os.makedirs(os.path.join(base, "ansible_collections", "hy3"))
    os.symlink(ROOT, os.path.join(base, "ansible_collections", "hy3", "fleet"))
    sys.path.insert(0, base)
    from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights
    return base, inspect_weights


def load_generator():
    spec = importlib.util.spec_from_file_location("make_sample_checkpoints",
                                                  os.path.join(ROOT, "scripts", "make_sample_checkpoints.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--shard-gb", type=float, default=1.5, help="shard size (GB); 1.5 gives ~400 bf16 shards")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--formats", default="bf16,fp8,int4")
    args = parser.parse_args()
    collections, inspect_weights = load_collection()
    generator = load_generator()
    work = tempfile.mkdtemp(prefix="hy3-bench-checkpoints-")
    try:
        for fmt in args.formats.split(","):
            directory = os.path.join(work, "hy3-" + fmt)
            tensors = generator.hy3_tensors(fmt)
            shards, total = generator.write_checkpoint(directory, tensors, generator.hy3_config(fmt),
                                                       int(args.shard_gb * 10 ** 9))
            times, info = [], None
            for _run in range(args.runs):
                start = time.perf_counter()
                info = inspect_weights(directory, tp=8)
                times.append(time.perf_counter() - start)
            assert info["status"] == "ok", info["reason"]
            print("hy3-%s: %d shards, %d tensors, %.1f GB: inspected in %.3f s median, %.3f s slowest (%d runs); "
                  "%.1f B parameters, %.2f GiB per rank at tp 8"
                  % (fmt, shards, len(tensors), total / 1e9, statistics.median(times), max(times), args.runs,
                     info["params_header"]["total"] / 1e9, info["weight_bytes_per_rank"] / 2 ** 30))
    finally:
        shutil.rmtree(work)
        shutil.rmtree(collections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
