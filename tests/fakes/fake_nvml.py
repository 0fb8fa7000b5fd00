# -*- coding: utf-8 -*-
"""A fake libnvidia-ml for tests: an object assigned to ``pynvml.nvmlLib``.

The REAL pynvml wrappers run against it (ctypes structs, string decoding,
error-code mapping); only the C library is replaced.  A GPU profile (YAML or
JSON) drives it:

    driver_version: "550.54.15"
    cuda_driver_version: 12040        # int, as NVML returns it
    memory_v2: true                   # false: driver without nvmlDeviceGetMemoryInfo_v2
    fault: null                       # library_not_found | driver_not_loaded | version_mismatch | no_permission
    gpus:
      - {name: NVIDIA H200, total_gib: 140, used_gib: 2, reserved_mib: 512,
         compute_capability: [9, 0], mig: [0, 0], lost: false, nvlink_links: 18,
         processes: [{pid: 4242, used_gib: 2}]}
    # nvlink_links: active NVLink links (0: a PCIe board, NVML answers "not supported"); absent: an NVML
    # without the query (function not found); nvlink_peers: the GPU indices it reaches over NVLink (P2P status;
    # default: every other GPU with links, an NVSwitch board); p2p_peers: those it has peer-to-peer access to
    # (default: every other GPU); unified_memory: true makes both memory queries "not supported" (GB10 / DGX Spark)
"""

import ctypes
import json
import os

import pynvml

GIB = 1024 ** 3
MIB = 1024 ** 2

INIT_FAULTS = {
    "library_not_found": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "version_mismatch": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    "no_permission": pynvml.NVML_ERROR_NO_PERMISSION,
}


def load_profile(path):
    with open(path) as handle:
        text = handle.read()
    if path.endswith(".json"):
        return json.loads(text)
    import yaml
    return yaml.safe_load(text)


class _Fn:
    """A callable that, like a ctypes function pointer, accepts attributes (restype)."""

    def __init__(self, impl):
        self.impl = impl

    def __call__(self, *args):
        return self.impl(*args)


def _out(ref):
    return ref._obj


def _write_str(buf, text):
    buf.value = text.encode()


class FakeNvmlLib:
    def __init__(self, profile):
        self.profile = profile
        self.gpus = profile.get("gpus") or []
        self.initialized = 0
        self.calls = []

    def __getattr__(self, name):
        impl = getattr(type(self), "_" + name, None)
        if impl is None:
            raise AttributeError(name)
        if name == "nvmlDeviceGetMemoryInfo_v2" and not self.profile.get("memory_v2", True):
            raise AttributeError(name)
        if name in ("nvmlDeviceGetNvLinkState", "nvmlDeviceGetP2PStatus") and not any(
                key in gpu for gpu in self.gpus for key in ("nvlink_links", "nvlink_peers", "p2p_peers")):
            raise AttributeError(name)

        def bound(*args):
            self.calls.append(name)
            return impl(self, *args)
        return _Fn(bound)

    # -- library / system
    def _nvmlInitWithFlags(self, flags):
        fault = self.profile.get("fault")
        if fault:
            return INIT_FAULTS[fault]
        self.initialized += 1
        return 0

    def _nvmlShutdown(self):
        self.initialized -= 1
        return 0

    def _nvmlErrorString(self, code):
        return b"fake NVML error %d" % code

    def _nvmlSystemGetDriverVersion(self, buf, size):
        _write_str(buf, self.profile.get("driver_version", "550.54.15"))
        return 0

    def _nvmlSystemGetNVMLVersion(self, buf, size):
        _write_str(buf, self.profile.get("nvml_version", "12." + self.profile.get("driver_version", "550.54.15")))
        return 0

    def _nvmlSystemGetCudaDriverVersion_v2(self, ref):
        _out(ref).value = self.profile.get("cuda_driver_version", 12040)
        return 0

    def _nvmlDeviceGetCount_v2(self, ref):
        _out(ref).value = len(self.gpus)
        return 0

    # -- devices
    def _nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        if index.value >= len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        slot = ctypes.c_size_t(index.value + 1)
        ctypes.memmove(ctypes.addressof(_out(ref)), ctypes.addressof(slot), ctypes.sizeof(ctypes.c_void_p))
        return 0

    def _gpu(self, handle):
        index = ctypes.cast(handle, ctypes.c_void_p).value - 1
        return index, self.gpus[index]

    def _check(self, handle):
        index, gpu = self._gpu(handle)
        return pynvml.NVML_ERROR_GPU_IS_LOST if gpu.get("lost") else 0

    def _nvmlDeviceGetName(self, handle, buf, size):
        _write_str(buf, self._gpu(handle)[1].get("name", "NVIDIA H200"))
        return self._check(handle)

    def _nvmlDeviceGetUUID(self, handle, buf, size):
        index, gpu = self._gpu(handle)
        _write_str(buf, gpu.get("uuid", "GPU-00000000-0000-0000-0000-%012d" % index))
        return self._check(handle)

    def _memory(self, handle, ref, v2):
        err = self._check(handle)
        if err:
            return err
        gpu = self._gpu(handle)[1]
        if gpu.get("unified_memory"):
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        total = int(gpu.get("total_gib", 80) * GIB)
        used = int(gpu.get("used_gib", 0) * GIB)
        reserved = int(gpu.get("reserved_mib", 0) * MIB)
        mem = _out(ref)
        mem.total = total
        if v2:
            mem.reserved, mem.used = reserved, used
        else:
            mem.used = used + reserved  # v1's used includes the reserved memory
        mem.free = total - used - reserved
        return 0

    def _nvmlDeviceGetMemoryInfo(self, handle, ref):
        return self._memory(handle, ref, v2=False)

    def _nvmlDeviceGetMemoryInfo_v2(self, handle, ref):
        return self._memory(handle, ref, v2=True)

    def _nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        cc = self._gpu(handle)[1].get("compute_capability", [9, 0])
        _out(major).value, _out(minor).value = cc
        return self._check(handle)

    def _nvmlDeviceGetMigMode(self, handle, current, pending):
        mig = self._gpu(handle)[1].get("mig")
        if mig is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        _out(current).value, _out(pending).value = mig
        return self._check(handle)

    def _nvmlDeviceGetNvLinkState(self, handle, link, ref):
        links = self._gpu(handle)[1].get("nvlink_links") or 0
        if not links:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if link >= links:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        _out(ref).value = 1
        return self._check(handle)

    def _nvmlDeviceGetP2PStatus(self, handle, other, caps_index, ref):
        gpu, (peer, peer_gpu) = self._gpu(handle)[1], self._gpu(other)
        if caps_index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            # listed peers, else an NVSwitch board: every GPU with links reaches every other
            default = bool(gpu.get("nvlink_links")) and bool(peer_gpu.get("nvlink_links"))
            linked = peer in gpu["nvlink_peers"] if "nvlink_peers" in gpu else default
        elif caps_index == pynvml.NVML_P2P_CAPS_INDEX_WRITE:
            linked = peer in gpu["p2p_peers"] if "p2p_peers" in gpu else True
        else:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        _out(ref).value = pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
        return self._check(handle)

    def _nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count_ref, array):
        err = self._check(handle)
        if err:
            return err
        procs = self._gpu(handle)[1].get("processes") or []
        count = _out(count_ref)
        if not procs:
            count.value = 0
            return 0
        if array is None or count.value < len(procs):
            count.value = len(procs)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        for i, proc in enumerate(procs):
            array[i].pid = proc["pid"]
            array[i].usedGpuMemory = int(proc.get("used_gib", 0) * GIB)
            array[i].gpuInstanceId = array[i].computeInstanceId = 0xFFFFFFFF
        count.value = len(procs)
        return 0


def install(profile):
    """Make pynvml talk to a FakeNvmlLib for this profile (dict or path); returns the fake."""
    if not isinstance(profile, dict):
        profile = load_profile(profile)
    fake = FakeNvmlLib(profile)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = fake
    return fake


def uninstall():
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = None


def install_from_env():
    path = os.environ.get("HY3_FAKE_NVML_PROFILE")
    if path:
        install(path)
