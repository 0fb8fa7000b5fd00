# -*- coding: utf-8 -*-
"""nvml_facts against the real pynvml code with a fake libnvidia-ml (fake_nvml)."""
import os
import stat

import fake_nvml
import pynvml
import pytest
from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.module_utils import nvml
from ansible_collections.hy3.fleet.plugins.modules import nvml_facts

GIB = 1024 ** 3
H200 = {"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [
    {"name": "NVIDIA H200", "uuid": "GPU-aaaa", "total_gib": 140, "used_gib": 10, "reserved_mib": 512,
     "compute_capability": [9, 0], "mig": [0, 0], "processes": [{"pid": 4242, "used_gib": 10}]},
    {"name": "NVIDIA H200", "uuid": "GPU-bbbb", "total_gib": 140, "mig": [1, 1]},
]}


@pytest.fixture(autouse=True)
def _clean_nvml():
    yield
    fake_nvml.uninstall()


def test_reads_every_field_through_real_pynvml():
    fake_nvml.install(H200)
    out = run_module(nvml_facts.main, {})
    assert not out.failed and out.result["nvml_state"] == "ok" and out.result["changed"] is False
    facts = out.result["ansible_facts"]["hy3_gpus"]
    assert facts["source"] == "pynvml" and facts["count"] == 2
    assert facts["driver_version"] == "550.54.15" and facts["cuda_driver_version"] == "12.4"
    assert facts["nvml_version"] == "12.550.54.15"
    gpu0, gpu1 = facts["devices"]
    assert gpu0["uuid"] == "GPU-aaaa" and gpu0["name"] == "NVIDIA H200"
    assert gpu0["memory_total"] == 140 * GIB
    assert gpu0["memory_used"] == 10 * GIB and gpu0["memory_reserved"] == 512 * 1024 ** 2
    assert gpu0["memory_free"] == 140 * GIB - 10 * GIB - 512 * 1024 ** 2
    assert gpu0["memory_api"] == "v2" and gpu0["compute_capability"] == "9.0"
    assert gpu0["processes"] == [{"pid": 4242, "used_memory": 10 * GIB, "engine": False}]
    assert gpu0["other_processes_memory"] == 10 * GIB and gpu0["engine_memory"] == 0
    assert gpu1["mig_mode"] == {"current": True, "pending": True} and facts["mig_enabled"]


def test_a_unified_memory_gpu_reports_the_host_s_memory(tmp_path, monkeypatch):
    """GB10 (DGX Spark): NVML answers "not supported" for memory; the host's memory is the GPU's (what CUDA, and
    so vLLM, reports there), not a failed host."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       127536556 kB\nMemFree:         2000000 kB\nMemAvailable:   120000000 kB\n")
    monkeypatch.setattr(nvml, "MEMINFO_PATH", str(meminfo))
    fake_nvml.install({"driver_version": "580.95.05", "cuda_driver_version": 13000, "gpus": [
        {"name": "NVIDIA GB10", "compute_capability": [12, 1], "unified_memory": True}]})
    out = run_module(nvml_facts.main, {})
    assert not out.failed and out.result["nvml_state"] == "ok"
    gpu = out.result["ansible_facts"]["hy3_gpus"]["devices"][0]
    assert gpu["memory_api"] == "host_meminfo" and gpu["memory_total"] == 127536556 * 1024
    assert gpu["memory_free"] == 120000000 * 1024 and gpu["memory_used"] == (127536556 - 120000000) * 1024
    meminfo.write_text("MemTotal:       127536556 kB\n")
    out = run_module(nvml_facts.main, {})
    assert out.failed and "MemAvailable" in out.result["msg"] and "unified memory" in out.result["msg"]
    # a discrete GPU without memory figures is a fault, not the host's memory
    fake_nvml.uninstall()
    fake_nvml.install({"driver_version": "580.95.05", "cuda_driver_version": 13000, "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0], "unified_memory": True}]})
    out = run_module(nvml_facts.main, {})
    assert out.failed and "host_meminfo" not in str(out.result)


def test_nvidia_smi_reports_a_unified_memory_gpu_s_host_memory(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       127536556 kB\nMemAvailable:   120000000 kB\n")
    monkeypatch.setattr(nvml, "MEMINFO_PATH", str(meminfo))
    line = "0, GPU-spark, NVIDIA GB10, 580.95.05, [N/A], [N/A], [N/A], [N/A], 12.1, [N/A], [N/A]"
    devices, drivers = nvml.parse_smi_gpus(line, nvml.SMI_GPU_FIELDS)
    assert drivers == ["580.95.05"] and devices[0]["memory_api"] == "host_meminfo"
    assert devices[0]["memory_free"] == 120000000 * 1024


def test_check_mode_reads_the_same():
    fake_nvml.install(H200)
    out = run_module(nvml_facts.main, {}, check_mode=True)
    assert not out.failed and out.result["ansible_facts"]["hy3_gpus"]["count"] == 2


def test_old_driver_without_memory_v2_falls_back_to_v1():
    fake = fake_nvml.install(dict(H200, memory_v2=False))
    gpu0 = run_module(nvml_facts.main, {}).result["ansible_facts"]["hy3_gpus"]["devices"][0]
    assert gpu0["memory_api"] == "v1" and gpu0["memory_reserved"] is None
    assert gpu0["memory_used"] == 10 * GIB + 512 * 1024 ** 2   # v1 used includes reserved
    assert "nvmlDeviceGetMemoryInfo" in fake.calls


@pytest.mark.parametrize("links, active", [
    (18, 18),          # an SXM / HGX board: every link up
    (0, 0),            # a PCIe board: NVML answers "not supported" for link 0
    (None, None),      # an NVML without the query (function not found): unknown, the budget goes by the name
])
def test_nvlink_links_are_counted(links, active):
    gpu = {"total_gib": 80}
    if links is not None:
        gpu["nvlink_links"] = links
    fake_nvml.install({"gpus": [gpu]})
    gpu0 = run_module(nvml_facts.main, {}).result["ansible_facts"]["hy3_gpus"]["devices"][0]
    assert gpu0["nvlink_active_links"] == active


@pytest.mark.parametrize("gpus, peers", [
    ([{"nvlink_links": 18}] * 4, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]),       # an NVSwitch board
    ([{"nvlink_links": 4, "nvlink_peers": [1]}, {"nvlink_links": 4, "nvlink_peers": [0]},
      {"nvlink_links": 4, "nvlink_peers": [3]}, {"nvlink_links": 4, "nvlink_peers": [2]}],
     [[1], [0], [3], [2]]),                                                          # NVL cards bridged in pairs
    ([{"nvlink_links": 0}] * 2, [[], []]),                                             # PCIe boards
    ([{}] * 2, [None, None]),                                                          # an NVML without the query
])
def test_nvlink_peers_are_read_pair_by_pair(gpus, peers):
    fake_nvml.install({"gpus": [dict(gpu, total_gib=141) for gpu in gpus]})
    devices = run_module(nvml_facts.main, {}).result["ansible_facts"]["hy3_gpus"]["devices"]
    assert [device["nvlink_peers"] for device in devices] == peers


def test_peer_to_peer_access_is_read_pair_by_pair():
    """GeForce cards answer "chipset not supported" for peer-to-peer access; vLLM's custom all-reduce needs it."""
    fake_nvml.install({"gpus": [{"total_gib": 24, "nvlink_links": 0, "p2p_peers": []}] * 2})
    geforce = run_module(nvml_facts.main, {}).result["ansible_facts"]["hy3_gpus"]["devices"]
    fake_nvml.install({"gpus": [{"total_gib": 48, "nvlink_links": 0}] * 2})
    l40s = run_module(nvml_facts.main, {}).result["ansible_facts"]["hy3_gpus"]["devices"]
    assert [d["p2p_peers"] for d in geforce] == [[], []] and [d["p2p_peers"] for d in l40s] == [[1], [0]]


def test_mig_not_supported_is_null():
    fake_nvml.install({"gpus": [{"total_gib": 24, "mig": None}]})
    gpu0 = run_module(nvml_facts.main, {}).result["ansible_facts"]["hy3_gpus"]["devices"][0]
    assert gpu0["mig_mode"] is None


def test_engine_processes_count_as_reclaimable():
    me = os.getpid()
    fake_nvml.install({"gpus": [{"total_gib": 80, "used_gib": 70,
                                 "processes": [{"pid": me, "used_gib": 60}, {"pid": 1, "used_gib": 10}]}]})
    gpu0 = run_module(nvml_facts.main, {"engine_pid": os.getppid()}).result["ansible_facts"]["hy3_gpus"]["devices"][0]
    assert gpu0["engine_memory"] == 60 * GIB and gpu0["other_processes_memory"] == 10 * GIB
    assert gpu0["memory_free_for_engine"] == 70 * GIB
    assert [p["engine"] for p in gpu0["processes"]] == [True, False]


def test_shuts_nvml_down_after_reading():
    fake = fake_nvml.install(H200)
    run_module(nvml_facts.main, {})
    assert fake.initialized == 0


@pytest.mark.parametrize("profile, state, words", [
    ({"fault": "library_not_found"}, "library_not_found", "install the NVIDIA driver"),
    ({"fault": "driver_not_loaded"}, "driver_not_loaded", "modprobe nvidia"),
    ({"fault": "version_mismatch"}, "version_mismatch", "reboot or reload the nvidia kernel module"),
    ({"fault": "no_permission"}, "no_permission", "privileges"),
    ({"gpus": [{"total_gib": 80}, {"total_gib": 80, "lost": True}]}, "gpu_lost", "GPU 1: GPU is lost"),
    ({"gpus": []}, "no_gpus", "zero GPUs"),
])
def test_faults_fail_with_the_remedy(profile, state, words):
    fake_nvml.install(profile)
    out = run_module(nvml_facts.main, {})
    assert out.failed and out.result["nvml_state"] == state
    assert words in out.result["msg"]
    assert "Traceback" not in out.result["msg"]


def test_real_library_missing_is_library_not_found(monkeypatch):
    """With no fake installed pynvml really dlopens libnvidia-ml.so.1, which this machine lacks."""
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a real NVIDIA driver is present")
    fake_nvml.uninstall()
    out = run_module(nvml_facts.main, {})
    assert out.failed and out.result["nvml_state"] == "library_not_found"


# ------------------------------------------------------------- nvidia-smi fallback
SMI_SCRIPT = """#!/bin/sh
case "$1" in
  --query-gpu=*memory.reserved*) %s ;;
  --query-gpu=*) echo "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 535.104.05, 81559, 20480, 61079" ;;
  --query-compute-apps=*) echo "GPU-aaaa, 777, 20480" ;;
esac
"""


def fake_smi(tmp_path, newer_output):
    path = tmp_path / "nvidia-smi"
    path.write_text(SMI_SCRIPT % newer_output)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_falls_back_to_nvidia_smi_without_pynvml(tmp_path, monkeypatch):
    monkeypatch.setattr(nvml_facts, "pynvml", None)
    smi = fake_smi(tmp_path, 'echo "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 550.54.15, 81559, 20480, 60567, 512, 9.0, '
                             'Disabled, [N/A]"')
    facts = run_module(nvml_facts.main, {"nvidia_smi_path": smi}).result["ansible_facts"]["hy3_gpus"]
    assert facts["source"] == "nvidia-smi" and facts["driver_version"] == "550.54.15"
    gpu = facts["devices"][0]
    assert gpu["memory_total"] == 81559 * 1024 ** 2 and gpu["memory_free"] == 60567 * 1024 ** 2
    assert gpu["memory_reserved"] == 512 * 1024 ** 2 and gpu["compute_capability"] == "9.0"
    assert gpu["mig_mode"] == {"current": False, "pending": False} and gpu["nvlink_active_links"] is None
    assert gpu["processes"][0]["pid"] == 777 and gpu["other_processes_memory"] == 20480 * 1024 ** 2


def test_nvidia_smi_of_an_old_driver_without_newer_fields(tmp_path, monkeypatch):
    monkeypatch.setattr(nvml_facts, "pynvml", None)
    smi = fake_smi(tmp_path, "echo 'Field \"memory.reserved\" is not a valid field to query.'; exit 2")
    gpu = run_module(nvml_facts.main, {"nvidia_smi_path": smi}).result["ansible_facts"]["hy3_gpus"]["devices"][0]
    assert gpu["memory_free"] == 61079 * 1024 ** 2 and gpu["memory_reserved"] is None


@pytest.mark.parametrize("text, state", [
    ("Failed to initialize NVML: Driver/library version mismatch", "version_mismatch"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "driver_not_loaded"),
    ("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.", "gpu_lost"),
    ("No devices were found", "no_gpus"),
])
def test_nvidia_smi_faults(tmp_path, monkeypatch, text, state):
    monkeypatch.setattr(nvml_facts, "pynvml", None)
    smi = fake_smi(tmp_path, 'echo "%s"; exit 9' % text)
    out = run_module(nvml_facts.main, {"nvidia_smi_path": smi})
    assert out.failed and out.result["nvml_state"] == state and nvml.REMEDIES[state] in out.result["msg"]


def test_no_source_at_all(monkeypatch):
    monkeypatch.setattr(nvml_facts, "pynvml", None)
    out = run_module(nvml_facts.main, {"nvidia_smi_path": "/nonexistent/nvidia-smi"})
    assert out.failed and out.result["nvml_state"] == "no_source" and "nvidia-ml-py" in out.result["msg"]


def test_prefer_pynvml_without_it(monkeypatch):
    monkeypatch.setattr(nvml_facts, "pynvml", None)
    out = run_module(nvml_facts.main, {"prefer": "pynvml"})
    assert out.failed and out.result["nvml_state"] == "no_source"


def test_uses_the_real_pynvml_module():
    assert nvml_facts.pynvml is pynvml
