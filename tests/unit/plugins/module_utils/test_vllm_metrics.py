# -*- coding: utf-8 -*-
from ansible_collections.hy3.fleet.plugins.module_utils import vllm_metrics

V1 = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="hy3"} 2.0
vllm:num_requests_running{engine="1",model_name="hy3"} 1.0
vllm:num_requests_waiting{engine="0",model_name="hy3"} 0.0
vllm:num_requests_waiting{engine="1",model_name="hy3"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="hy3"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="hy3"} 0.75
vllm:request_success_total{engine="0",finished_reason="stop",model_name="a b"} 7.0
"""
V0 = 'vllm:num_requests_running{model_name="m"} 0.0\nvllm:num_requests_waiting{model_name="m"} 0.0\n' \
     'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'


def test_engines_are_summed_and_usage_averaged():
    assert vllm_metrics.load(V1) == {"running": 3, "waiting": 3, "kv_cache_usage": 0.5}
    assert not vllm_metrics.idle(vllm_metrics.load(V1))


def test_v0_usage_name_and_idle():
    load = vllm_metrics.load(V0)
    assert load == {"running": 0, "waiting": 0, "kv_cache_usage": 0.5} and vllm_metrics.idle(load)


def test_missing_gauges_are_unknown_not_idle():
    load = vllm_metrics.load("# nothing here\nprocess_cpu_seconds_total 12.5\nbroken line\n")
    assert load == {"running": None, "waiting": None, "kv_cache_usage": None}
    assert not vllm_metrics.idle(load)


def test_labels_with_spaces_and_braces_parse():
    samples = vllm_metrics.parse('x{a="b c}",d="e"} 4\ny 5 1700000000\n')
    assert samples == {"x": [4.0], "y": [5.0]}
