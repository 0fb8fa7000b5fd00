# -*- coding: utf-8 -*-
"""engine_budget: the profile and sizes come from the tiers' checkpoints; damaged ones fail before anything runs."""
import json
import os

import sample_checkpoints
from ansible.module_utils import basic
from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
from ansible_collections.hy3.fleet.plugins.modules import engine_budget

GIB = 1024 ** 3


def devices(n, total_gib, free_gib, **extra):
    return [dict({"index": i, "memory_total": int(total_gib * GIB), "memory_free": int(free_gib * GIB)}, **extra)
            for i in range(n)]


def args(tiers, **extra):
    return dict({"gpus": devices(2, 16, 16), "max_model_len": 4096, "max_num_seqs": 1, "tiers": tiers}, **extra)


def truncate_a_shard(directory):
    shard = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))[1]
    os.truncate(os.path.join(directory, shard), 1000)
    return shard


def test_profile_and_weights_come_from_the_checkpoint(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    out = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16}]))
    assert not out.failed and out.result["changed"] is False
    r = out.result
    assert r["model_profile"]["architecture"] == "HYV3ForCausalLM" and r["model_profile"]["num_hidden_layers"] == 3
    found = r["weight_dirs"][0]
    assert (found["quantization"], found["status"], found["tensor_parallel_size"]) == ("bf16", "ok", 2)
    assert r["budget_bytes"]["weights_measured"] == found["weight_bytes_per_rank"]
    assert r["total_params_b"] == round(found["params_config"]["total"] / 1e9, 2)


def test_load_mtp_counts_the_mtp_layer_bytes(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]
    without = run_module(engine_budget.main, args(tiers)).result
    found = without["weight_dirs"][0]
    with_mtp = run_module(engine_budget.main, args(tiers, load_mtp=True)).result
    assert with_mtp["budget_bytes"]["weights_measured"] == found["weight_bytes_per_rank"] + found["mtp_bytes_per_rank"]


def test_model_config_overrides_what_was_read(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    r = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16}], max_model_len=None,
                                            model_config={"max_position_embeddings": 2048})).result
    assert r["model_profile"]["max_position_embeddings"] == 2048 and r["max_model_len"] == 2048


def test_absent_tier_is_skipped_with_its_status(tmp_path):
    fp8 = sample_checkpoints.write(tmp_path / "fp8", "fp8")
    r = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": str(tmp_path / "absent")},
                                            {"name": "fp8", "weights_dir": fp8}])).result
    assert r["quantization"] == "fp8" and r["vllm_quantization"] == "fp8"
    assert r["skipped_tiers"][0]["quantization"] == "bf16" and r["skipped_tiers"][0]["status"] == "absent"
    assert [d["status"] for d in r["weight_dirs"]] == ["absent", "ok"]


def test_chosen_damaged_tier_fails_before_anything_runs(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    fp8 = sample_checkpoints.write(tmp_path / "fp8", "fp8")
    shard = truncate_a_shard(bf16)
    out = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16},
                                              {"name": "fp8", "weights_dir": fp8}]))
    assert out.failed and out.result["status"] == "weight_loading"
    assert "weight loading would fail for tier bf16" in out.result["msg"] and shard in out.result["msg"]
    assert "check the weight directory and file list" in out.result["msg"]
    damaged = out.result["weight_dirs"][0]
    assert (damaged["status"], damaged["problem"]) == ("weight_loading", "truncated")
    assert damaged["profile"]["model_type"] == "hy_v3" and out.result["weight_dirs"][1]["status"] == "ok"


def test_damaged_tier_the_budget_would_not_choose_is_reported_and_skipped(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    int4 = sample_checkpoints.write(tmp_path / "int4", "int4")
    truncate_a_shard(int4)
    r = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16},
                                            {"name": "int4", "weights_dir": int4}])).result
    assert r["quantization"] == "bf16" and r["fits"]
    assert r["skipped_tiers"] == [{"quantization": "int4", "status": "weight_loading",
                                   "reason": r["weight_dirs"][1]["reason"]}]
    assert all(step["quantization"] != "int4" for step in r["ladder"])


def test_no_checkpoint_anywhere(tmp_path):
    out = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": str(tmp_path / "none")}]))
    assert out.failed and out.result["status"] == "no_checkpoint" and "bf16: " + str(tmp_path / "none") in out.result["msg"]


def test_bad_config_in_the_only_tier_is_a_weight_loading_failure(tmp_path):
    d = tmp_path / "bf16"
    d.mkdir()
    (d / "config.json").write_text("{")
    out = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": str(d)}]))
    assert out.failed and out.result["status"] == "weight_loading"
    assert str(d / "config.json") in out.result["msg"] and "not valid JSON" in out.result["msg"]


def test_tier_holding_another_precision_warns(tmp_path):
    fp8 = sample_checkpoints.write(tmp_path / "fp8", "fp8")
    r = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": fp8}])).result
    assert any("tier bf16 (16 bit) holds a 8-bit checkpoint" in w for w in r["weight_dirs"][0]["warnings"])


def test_cannot_hold_fails_or_reports(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    # the engine's own buffers (runtime workspaces, sampler) alone outgrow a 0.25 GiB card
    base = args([{"name": "bf16", "weights_dir": bf16}], gpus=devices(1, 0.25, 0.25))
    out = run_module(engine_budget.main, base)
    assert out.failed and "this host cannot hold the model" in out.result["msg"]
    out = run_module(engine_budget.main, dict(base, fail_when_cannot_hold=False), check_mode=True)
    assert not out.failed and out.result["verdict"] == "cannot hold" and out.result["weight_dirs"][0]["status"] == "ok"


def test_bad_inputs_fail_cleanly(tmp_path):
    base = args([{"name": "bf16", "weights_dir": sample_checkpoints.write(tmp_path / "bf16")}])
    cases = [
        ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization must be in (0, 1]", "bad_input"),
        ({"tensor_parallel_size": 3}, "more than the 2 GPU(s)", "bad_input"),
        ({"tiers": [{"name": "int2", "weights_dir": "/x"}]}, "value of name must be one of", None),
        ({"model_config": {"head_dim": -1}}, "the override merged over %s: head_dim must be a positive integer"
         % os.path.join(str(tmp_path / "bf16"), "config.json"), "bad_input"),
        ({"gpus": devices(1, 16, 16, mig_mode={"current": True, "pending": True})}, "MIG is enabled on GPU(s) 0",
         "bad_input"),
        ({"max_num_seqs": "many"}, "cannot be converted to an int", None),
        ({"engine_config": {"enforce-eager": True}},
         "enforce-eager is set by the collection (enforce_eager / hy3_enforce_eager)", "bad_input"),
        ({"engine_config": {"max_num_seqs": 8}}, "max_num_seqs is set by the collection", "bad_input"),
        ({"engine_config": {"port": 9000}}, "port is set by the collection (hy3_serve_port)", "bad_input"),
        ({"engine_config": {"block-size": "big"}}, "block-size: 'big' is not a value vLLM takes there", "bad_input"),
        ({"engine_config": {"block-size": 32}, "block_size": 16}, "block-size 32 in engine_config and block_size 16",
         "bad_input"),
    ]
    for extra, message, status in cases:
        out = run_module(engine_budget.main, dict(base, **extra))
        assert out.failed, extra
        assert message in out.result["msg"], (extra, out.result["msg"])
        assert out.result.get("status") == status, (extra, out.result)
        assert "Traceback" not in out.result["msg"]


def test_tier_quantization_override(tmp_path):
    int4 = sample_checkpoints.write(tmp_path / "int4", "int4")
    r = run_module(engine_budget.main, args([{"name": "int4", "quantization": "awq_marlin", "weights_dir": int4}])).result
    assert r["vllm_quantization"] == "awq_marlin"
    r = run_module(engine_budget.main, args([{"name": "int4", "weights_dir": int4}])).result
    assert r["vllm_quantization"] is None                      # read from the checkpoint


def test_engine_settings_reach_the_budget(tmp_path):
    """The engine knobs are budget inputs; the CPU engine's KV cache is exactly what it is told."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]
    eager = run_module(engine_budget.main, args(tiers, gpus=devices(2, 80, 80, name="NVIDIA H100 80GB HBM3"),
                                                engine_version="0.30.0", enforce_eager=True,
                                                max_num_batched_tokens=4096)).result
    assert eager["engine"]["version"] == "0.30.0" and eager["engine"]["max_num_batched_tokens"] == 4096
    assert eager["budget_bytes"]["cudagraph"] == 0 and eager["gpu_memory_utilization"] == 0.92
    assert eager["calibration_fields"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    cpu = run_module(engine_budget.main, args(tiers, engine_platform="cpu", kv_cache_memory_bytes=GIB)).result
    assert cpu["budget_bytes"]["kv_available"] == GIB and cpu["budget_bytes"]["overhead_source"] == "explicit_kv"
    flat = run_module(engine_budget.main, args(tiers, runtime_overhead_gib=2.0)).result
    assert flat["budget_bytes"]["overhead"] == 2 * GIB and flat["budget_bytes"]["overhead_source"] == "override"


def test_nvml_link_state_decides_the_tensor_parallel_buffers(tmp_path):
    """An H100 named like an SXM board but whose NVML reports no NVLink (a PCIe host) is budgeted with NCCL's
    PCIe channels alone; unknown link state falls back to the name."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]

    def budget(links):
        gpus = devices(2, 80, 80, name="NVIDIA H100 80GB HBM3", nvlink_active_links=links)
        return run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.19.0")).result

    pcie, nvlink, unknown = budget(0), budget(18), budget(None)
    assert (pcie["engine"]["nvlink"], nvlink["engine"]["nvlink"], unknown["engine"]["nvlink"]) == (False, True, None)
    assert nvlink["budget_bytes"]["non_torch"] - pcie["budget_bytes"]["non_torch"] > GIB
    assert unknown["budget_bytes"]["non_torch"] == nvlink["budget_bytes"]["non_torch"]      # the name says SXM


def test_a_tensor_parallel_group_is_nvlink_connected_only_when_every_pair_is(tmp_path):
    """Four H200 NVL cards bridged in pairs each have active links, but vLLM's custom all-reduce serves more than two
    GPUs only when every pair is linked (is_fully_connected), so the graphs capture NCCL's all-reduce: the v0.20
    graph estimate, counted before the KV cache, is larger than on a fully bridged four."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]

    def budget(peers):
        gpus = [dict(gpu, nvlink_peers=reach) for gpu, reach in
                zip(devices(4, 140, 140, name="NVIDIA H200 NVL", nvlink_active_links=4), peers)]
        return run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.20.0",
                                                   tensor_parallel_size=4)).result

    pairs = budget([[1], [0], [3], [2]])
    four = budget([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])
    assert (pairs["engine"]["fully_connected"], four["engine"]["fully_connected"]) == (False, True)
    assert pairs["budget_bytes"]["cudagraph"] > four["budget_bytes"]["cudagraph"]
    # the communicators' buffers still follow the links each GPU has: the pairing moves the graphs alone
    assert pairs["engine"]["nvlink"] is True and pairs["budget_bytes"]["non_torch"] == four["budget_bytes"]["non_torch"]
    # the group is the first tensor_parallel_size GPUs: two linked ones make an NVLink pair
    two = run_module(engine_budget.main, args(tiers, gpus=[dict(gpu, nvlink_peers=reach) for gpu, reach in zip(
        devices(4, 140, 140, name="NVIDIA H200 NVL", nvlink_active_links=4), [[1], [0], [3], [2]])],
        engine_version="0.20.0", tensor_parallel_size=2)).result
    assert two["engine"]["fully_connected"] is True


def test_two_gpus_without_peer_to_peer_access_capture_nccl_s_all_reduce(tmp_path):
    """vLLM's custom all-reduce needs peer-to-peer access ("your platform lacks GPU P2P capability"): without it two
    PCIe cards capture NCCL's all-reduce in their graphs, which the v0.20 estimate counts before the KV cache."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]

    def budget(peers):
        gpus = [dict(gpu, p2p_peers=reach) for gpu, reach in
                zip(devices(2, 24, 24, name="NVIDIA GeForce RTX 4090", nvlink_active_links=0), peers)]
        return run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.20.0")).result

    closed, open_, unknown = budget([[], []]), budget([[1], [0]]), budget([None, None])
    assert (closed["engine"]["p2p"], open_["engine"]["p2p"], unknown["engine"]["p2p"]) == (False, True, None)
    assert closed["budget_bytes"]["cudagraph"] > open_["budget_bytes"]["cudagraph"] == unknown["budget_bytes"]["cudagraph"]


def test_a_node_group_s_launch_is_multi_node(tmp_path):
    """The serve role launches a node group with nnodes = its size, and vLLM turns its custom all-reduce off for
    nnodes > 1: two nodes of two L40S each capture NCCL's all-reduce in their graphs."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    result = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16}],
                                                 gpus=devices(4, 44, 44, name="NVIDIA L40S"), engine_version="0.20.0",
                                                 tensor_parallel_size=2, pipeline_parallel_size=2)).result
    single = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16}],
                                                 gpus=devices(2, 44, 44, name="NVIDIA L40S"), engine_version="0.20.0",
                                                 tensor_parallel_size=2)).result
    assert result["engine"]["nnodes"] == 2 and single["engine"]["nnodes"] is None
    assert engine_memory.nccl_in_graphs(2, result["engine"]) and not engine_memory.nccl_in_graphs(2, single["engine"])


def test_other_processes_on_the_gpu_reach_an_engine_that_measures_device_wide(tmp_path):
    """nvml_facts' other_processes_memory: a v0.6.4 engine counts it against its KV cache, a v0.19 one does not."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]

    def kv(version, others_gib):
        gpus = devices(2, 80, 80 - others_gib, name="NVIDIA H100 80GB HBM3",
                       other_processes_memory=int(others_gib * GIB))
        result = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version=version,
                                                     gpu_memory_utilization=0.5)).result
        return result["budget_bytes"]["kv_available"]

    assert kv("0.6.4", 0) - kv("0.6.4", 2) == 2 * GIB
    assert kv("0.19.0", 0) == kv("0.19.0", 2)


def test_the_host_decides_the_sampler_of_an_early_engine(tmp_path):
    """v0.10.1 without flashinfer-python sorts the full logits in its profile run (38.4 B an element instead of
    FlashInfer's 14.9), and so does a host that does not say (the larger amount); installed, FlashInfer's sampler
    is used; VLLM_USE_FLASHINFER_SAMPLER=1 wins where installed."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]

    def budget(**extra):
        gpus = devices(1, 80, 80, name="NVIDIA H100 80GB HBM3")
        result = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.10.1", max_num_seqs=1024,
                                                     min_max_num_seqs=1024, model_config={"vocab_size": 151936},
                                                     **extra)).result
        return result["engine"]["flashinfer_sampler"], result["budget_bytes"]["activation_peak"]

    (bare, sorted_peak), (unknown, unknown_peak) = budget(flashinfer_installed=False), budget()
    installed, lean_peak = budget(flashinfer_installed=True)
    opted_in = budget(flashinfer_installed=False, engine_environment={"VLLM_USE_FLASHINFER_SAMPLER": "1"})
    assert (bare, unknown, installed, opted_in[0]) == (False, None, True, False)   # opting in needs the package
    assert budget(flashinfer_installed=True, engine_environment={"VLLM_USE_FLASHINFER_SAMPLER": "1"})[0] is True
    assert sorted_peak == unknown_peak > 2 * lean_peak


def test_cpu_engine_without_a_kv_size_is_a_clear_error(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    out = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16}], engine_platform="cpu"))
    assert out.failed and "VLLM_CPU_KVCACHE_SPACE" in out.result["msg"] and out.result["status"] == "bad_input"


def test_further_engine_config_reaches_the_budget(tmp_path, monkeypatch):
    """The serve role's further vLLM keys: those that move memory are modelled, unmodelled ones are said."""
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning: said.append(warning))
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]
    gpus = devices(2, 80, 80, name="NVIDIA H100 80GB HBM3")
    plain = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.30.0", max_num_seqs=64)).result
    capped = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.30.0", max_num_seqs=64, engine_config={
        "max-cudagraph-capture-size": 8, "no-async-scheduling": True, "block-size": 32,
        "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}))
    assert not capped.failed
    assert capped.result["engine"]["max_cudagraph_capture_size"] == 8 and capped.result["engine"]["async_scheduling"] is False
    assert capped.result["budget_bytes"]["cudagraph"] < plain["budget_bytes"]["cudagraph"]    # 4 sizes, not 11
    assert capped.result["budget_bytes"]["kv_block_size"] == 32
    assert capped.result["engine"]["speculative_method"] == "mtp" and not any("speculative" in w for w in said)
    # the attention backend is modelled: FlashInfer's workspace joins the graph estimate, nothing is said
    flashinfer = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.30.0", max_num_seqs=64,
                                                     engine_config={"attention-backend": "flashinfer"})).result
    assert flashinfer["engine"]["attention_backend"] == "FLASHINFER"
    assert flashinfer["budget_bytes"]["cudagraph"] - plain["budget_bytes"]["cudagraph"] == 394 * 2 ** 20
    assert flashinfer["calibration_fields"]["engine_config"] == "attention_backend=FLASHINFER"
    assert not any("attention" in w for w in said)


def test_mtp_speculation_loads_the_mtp_layers_and_skips_a_checkpoint_without_them(tmp_path):
    """speculative-config method mtp: the MTP layer's bytes and KV layer count as with load_mtp, the drafter's phase
    is a budget line, and a tier whose shards hold no MTP layer is not offered (the engine could not draft)."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]
    plain = run_module(engine_budget.main, args(tiers, engine_version="0.29.0")).result
    found = plain["weight_dirs"][0]
    mtp = {"speculative-config": {"method": "deepseek_mtp", "num_speculative_tokens": 2}}
    drafting = run_module(engine_budget.main, args(tiers, engine_version="0.29.0", engine_config=mtp)).result
    assert drafting["budget_bytes"]["weights_measured"] == found["weight_bytes_per_rank"] + found["mtp_bytes_per_rank"]
    assert drafting["budget_bytes"]["kv_bytes_per_token"] > plain["budget_bytes"]["kv_bytes_per_token"]
    assert drafting["budget_bytes"]["speculative"] > 0 == plain["budget_bytes"]["speculative"]
    assert drafting["budget_bytes"]["cudagraph"] > plain["budget_bytes"]["cudagraph"]
    assert drafting["engine"]["num_speculative_tokens"] == 2 and drafting["calibration_fields"]["engine_config"] == (
        "num_speculative_tokens=2,speculative_method=mtp")
    fp8 = sample_checkpoints.write(tmp_path / "fp8", "fp8")
    int4 = sample_checkpoints.write(tmp_path / "int4", "int4")              # written without its MTP layer
    both = [{"name": "fp8", "weights_dir": fp8}, {"name": "int4", "weights_dir": int4}]
    r = run_module(engine_budget.main, args(both, engine_config=mtp)).result
    assert r["quantization"] == "fp8" and [(t["quantization"], t["status"]) for t in r["skipped_tiers"]] == [
        ("int4", "no_mtp_layer")]
    alone = run_module(engine_budget.main, args(both[1:], engine_config=mtp))
    assert alone.failed and alone.result["status"] == "bad_input" and "holds no MTP layer" in alone.result["msg"]
    assert not run_module(engine_budget.main, args(both[1:])).failed          # drafting another way, it serves
    no_mtp_config = dict(sample_checkpoints.TINY_HY3, num_nextn_predict_layers=0)
    plain_model = sample_checkpoints.write(tmp_path / "no-mtp", config=no_mtp_config)
    out = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": plain_model}], engine_config=mtp))
    assert out.failed and out.result["status"] == "bad_input" and "num_nextn_predict_layers is 0" in out.result["msg"]


def test_a_multimodal_checkpoint_budgets_its_vision_tower(tmp_path, monkeypatch):
    """A Qwen2.5-VL-shaped checkpoint: its preprocessor is read, the tower's profile run is a budget line, and an
    engine whose runner leaves the tower out of its profile run (0.25) is said."""
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning: said.append(warning))
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    config_path = os.path.join(bf16, "config.json")
    with open(config_path) as handle:
        config = json.load(handle)
    for moe_field in ("moe_intermediate_size", "num_experts", "num_experts_per_tok", "num_shared_experts",
                      "first_k_dense_replace"):
        config.pop(moe_field, None)                                      # a dense language model, as Qwen2.5-VL's
    config.update(model_type="qwen2_5_vl", vision_config={
        "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
        "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2})
    with open(config_path, "w") as handle:
        json.dump(config, handle)
    with open(os.path.join(bf16, "preprocessor_config.json"), "w") as handle:
        json.dump({"max_pixels": 1003520, "min_pixels": 3136}, handle)      # 1280 tokens an image
    tiers = [{"name": "bf16", "weights_dir": bf16}]
    gpus = devices(1, 80, 80, name="NVIDIA H100 80GB HBM3")
    v1 = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.23.0", max_model_len=4096)).result
    assert v1["model_profile"]["vision"]["image_max_pixels"] == 1003520
    assert v1["budget_bytes"]["encoder_profile"] > 0 and v1["calibration_fields"]["engine_config"] == \
        "encoder=video:3840x1"                                           # 3 frame pairs of 1280 tokens in 4096
    assert not said
    v2 = run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.25.0", max_model_len=4096)).result
    assert v2["budget_bytes"]["encoder_profile"] == 0
    assert any("does not profile the vision tower" in w for w in said)


TINY_TOWER_BYTES = 2 * 128 * 64 * 2


def tiny_vl_tiers(path, **config):
    """The tiny model with a Qwen2.5-VL tower in its config and visual.* tensors (TINY_TOWER_BYTES) in its shards."""
    gen = sample_checkpoints.generator
    config = dict(sample_checkpoints.TINY_HY3, vision_config={
        "depth": 2, "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
        "out_hidden_size": 128, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}, **config)
    tower = [("visual.blocks.%d.mlp.up_proj.weight" % i, "BF16", [128, 64]) for i in range(2)]
    gen.write_checkpoint(str(path), gen.hy3_tensors("bf16", config) + tower, config, 200_000)
    return [{"name": "bf16", "weights_dir": str(path)}]


def test_a_tower_the_engine_does_not_build_leaves_the_measured_weights(tmp_path):
    """A multimodal checkpoint served with language-model-only: the tower's bytes, read from the headers, are not
    budgeted."""
    tiers = tiny_vl_tiers(tmp_path / "vl")
    built = run_module(engine_budget.main, args(tiers, engine_version="0.30.0")).result
    skipped = run_module(engine_budget.main, args(tiers, engine_version="0.30.0",
                                                  engine_config={"language-model-only": True})).result
    found = built["weight_dirs"][0]
    assert found["tower_bytes_per_rank"] == TINY_TOWER_BYTES // 2          # split over the two ranks
    assert built["vision_tower_skipped"] is None and skipped["vision_tower_skipped"] == "--language-model-only"
    assert built["budget_bytes"]["weights"] - skipped["budget_bytes"]["weights"] == found["tower_bytes_per_rank"]


def test_a_data_parallel_tower_is_budgeted_whole_from_the_headers(tmp_path):
    """mm-encoder-tp-mode data on a class that runs it (a Qwen2.5-VL architecture over the tiny model): the headers'
    whole tower (tower_bytes) replaces each rank's share of it."""
    tiers = tiny_vl_tiers(tmp_path / "vl", architectures=["Qwen2_5_VLForConditionalGeneration"])
    split = run_module(engine_budget.main, args(tiers, engine_version="0.30.0")).result
    whole = run_module(engine_budget.main, args(tiers, engine_version="0.30.0",
                                                engine_config={"mm-encoder-tp-mode": "data"})).result
    found = split["weight_dirs"][0]
    assert found["tower_bytes"] == TINY_TOWER_BYTES and found["tower_bytes_per_rank"] == TINY_TOWER_BYTES // 2
    assert whole["budget_bytes"]["weights"] - split["budget_bytes"]["weights"] == found["tower_bytes"] // 2
    assert "mm_encoder_tp_mode=data" in whole["calibration_fields"]["engine_config"]


def test_a_bf16_checkpoint_served_in_float32_is_not_called_a_32_bit_checkpoint(tmp_path):
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    r = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16, "dtype": "float32"}])).result
    found = r["weight_dirs"][0]
    assert found["bits"] == 32 and not any("32-bit checkpoint" in w for w in found["warnings"])
    plain = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": bf16}])).result["weight_dirs"][0]
    assert found["weight_bytes_per_rank"] > 1.9 * plain["weight_bytes_per_rank"]


def test_the_engine_environment_moves_the_budget_and_its_key(tmp_path):
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 on a v0.30 engine: no CUDA-graph estimate is taken off the KV cache,
    and the calibration key names the variable, so an engine run without it never calibrates this one."""
    bf16 = sample_checkpoints.write(tmp_path / "bf16")
    tiers = [{"name": "bf16", "weights_dir": bf16}]
    gpus = devices(1, 80, 80, name="NVIDIA H100 80GB HBM3")

    def budget(environment):
        return run_module(engine_budget.main, args(tiers, gpus=gpus, engine_version="0.30.0", max_num_seqs=64,
                                                   engine_environment=environment)).result

    default, off = budget({}), budget({"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0", "HF_HOME": "/hf"})
    assert default["budget_bytes"]["cudagraph"] > 0 and off["budget_bytes"]["cudagraph"] == 0
    assert off["budget_bytes"]["kv_available"] == default["budget_bytes"]["kv_available"] + default["budget_bytes"]["cudagraph"]
    assert (off["engine"]["cudagraph_counted"], off["engine"]["environment"]) == (False, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0")
    assert default["engine"]["environment"] is None
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" in off["calibration_fields"]["engine_config"]
    assert "VLLM_MEMORY" not in default["calibration_fields"]["engine_config"]


def test_a_checkpoint_in_mistral_s_own_format_too_reaches_the_budget(tmp_path):
    """params.json and consolidated*.safetensors beside config.json (as mistralai ships them): the engine may read that
    format (config-format auto), which the budget is told; a tier without them, or one of two, tells it nothing."""
    import shutil
    plain = sample_checkpoints.write(tmp_path / "bf16")
    both = str(tmp_path / "both")
    shutil.copytree(plain, both)
    shutil.copy(os.path.join(both, sorted(f for f in os.listdir(both) if f.endswith(".safetensors"))[0]),
                os.path.join(both, "consolidated.safetensors"))
    with open(os.path.join(both, "params.json"), "w") as handle:
        handle.write("{}")
    told = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": both}])).result
    assert told["engine"]["mistral_format_files"] is True
    assert [d["mistral_format_files"] for d in told["weight_dirs"]] == [True]
    plain_result = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": plain}])).result
    assert plain_result["engine"]["mistral_format_files"] is False
    assert told["budget_bytes"]["weights"] == plain_result["budget_bytes"]["weights"]      # read once
    absent = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": both},
                                                  {"name": "fp8", "weights_dir": str(tmp_path / "none")}])).result
    assert absent["engine"]["mistral_format_files"] is True         # an absent tier is not asked
    fp8 = sample_checkpoints.write(tmp_path / "fp8", "fp8")
    mixed = run_module(engine_budget.main, args([{"name": "bf16", "weights_dir": both},
                                                 {"name": "fp8", "weights_dir": fp8}])).result
    assert mixed["engine"]["mistral_format_files"] is True          # the format that holds more on a rank
