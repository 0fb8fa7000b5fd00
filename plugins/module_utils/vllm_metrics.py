# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""What vLLM's /metrics (Prometheus text format) says about load and the KV cache.

vLLM exports gauges per engine (labels model_name, engine): vllm:num_requests_running and
vllm:num_requests_waiting (docs.vllm.ai "Production Metrics"; vllm/v1/metrics/loggers.py), and the KV
cache usage as vllm:kv_cache_usage_perc (V1) or vllm:gpu_cache_usage_perc (V0 and early V1), a
fraction in [0, 1] despite the name. Several engines (data parallel) are summed; usage is the mean.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")

# name{labels} value [timestamp]; the label block may hold spaces inside quoted values
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)')


def parse(text):
    """Prometheus text -> {metric name: [sample values]}; comments and malformed lines are skipped."""
    samples = {}
    for line in (text or "").splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.setdefault(match.group(1), []).append(value)
    return samples


def load(text):
    """running, waiting (None when the engine does not export them) and kv_cache_usage (0..1 or None)."""
    samples = parse(text)
    usage = next((samples[name] for name in KV_USAGE if samples.get(name)), None)
    return {
        "running": int(sum(samples[RUNNING])) if RUNNING in samples else None,
        "waiting": int(sum(samples[WAITING])) if WAITING in samples else None,
        "kv_cache_usage": round(sum(usage) / len(usage), 4) if usage else None,
    }


def idle(state):
    """True when the engine reports no running and no waiting request."""
    return state.get("running") == 0 and state.get("waiting") == 0
