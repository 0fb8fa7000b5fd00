# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Read GPU facts through NVML (pynvml), or nvidia-smi when pynvml is missing.

Every expected fault becomes an NvmlFault with a state name and a remedy; the
caller turns it into fail_json, never a traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os

MIB = 1024 * 1024

REMEDIES = {
    "library_not_found": "libnvidia-ml.so.1 was not found: install the NVIDIA driver on this host "
                         "(or fix the loader path) and run again",
    "driver_not_loaded": "the NVIDIA kernel driver is not loaded: load it (modprobe nvidia) or reboot, then run again",
    "version_mismatch": "the NVML library and the loaded kernel module differ (a driver upgrade without a reboot): "
                        "reboot or reload the nvidia kernel module, then run again",
    "gpu_lost": "a GPU fell off the bus: drain this host, check dmesg for Xid errors, reset the GPU or reboot",
    "no_permission": "NVML refused access: run the task with privileges that can read /dev/nvidia*",
    "no_gpus": "the driver reports zero GPUs: check CUDA_VISIBLE_DEVICES, cgroups/containers and lspci",
    "no_source": "neither pynvml (pip install nvidia-ml-py) nor nvidia-smi is available: install the NVIDIA driver "
                 "and nvidia-ml-py",
    "error": "NVML returned an unexpected error; see the message",
}


class NvmlFault(Exception):
    def __init__(self, state, detail):
        self.state = state
        self.detail = detail
        super(NvmlFault, self).__init__("%s (%s): %s" % (REMEDIES[state], state, detail))


def _fault_for(pynvml, err, where):
    states = (
        ("NVMLError_LibraryNotFound", "library_not_found"),
        ("NVMLError_DriverNotLoaded", "driver_not_loaded"),
        ("NVMLError_LibRmVersionMismatch", "version_mismatch"),
        ("NVMLError_GpuIsLost", "gpu_lost"),
        ("NVMLError_NoPermission", "no_permission"),
    )
    for cls_name, state in states:
        if isinstance(err, getattr(pynvml, cls_name)):
            return NvmlFault(state, "%s: %s" % (where, err))
    return NvmlFault("error", "%s: %s" % (where, err))


def _optional(pynvml, call, *args, **kwargs):
    """Value of an NVML query the device may not support (None then)."""
    try:
        return call(*args, **kwargs)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None


# A GPU that shares the host's memory (Jetson Orin 8.7, Jetson Thor 11.0, GB10 / DGX Spark 12.1: the capabilities
# vLLM's mem_utils treats as unified memory) has no NVML memory figures ("Not Supported"); CUDA's cudaMemGetInfo,
# which vLLM sizes its cache from, reports the system's memory there.
MEMINFO_PATH = "/proc/meminfo"
UNIFIED_MEMORY_CAPABILITIES = ("8.7", "11.0", "12.1")


def _memory(pynvml, handle, capability=None):
    """Memory info v2 (with reserved) where the driver has it, else v1; on a unified-memory GPU, where NVML has
    neither, the host's memory (host_memory). A discrete GPU without memory figures is a fault."""
    try:
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return {"total": mem.total, "used": mem.used, "free": mem.free, "reserved": mem.reserved, "api": "v2"}
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported):
        pass
    try:
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    except pynvml.NVMLError_NotSupported:
        if capability in UNIFIED_MEMORY_CAPABILITIES:
            return host_memory()
        raise
    return {"total": mem.total, "used": mem.used, "free": mem.free, "reserved": None, "api": "v1"}


def host_memory(path=None):
    """The host's memory as a unified-memory GPU's (MemTotal, and MemAvailable as free: what the system can hand
    out without swapping); NvmlFault when the file cannot be read."""
    path = path or MEMINFO_PATH
    fields = {}
    try:
        with open(path) as handle:
            for line in handle:
                name, rest = line.split(":", 1) if ":" in line else (line, "")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    fields[name.strip()] = int(parts[0]) * 1024 if parts[1:2] == ["kB"] else int(parts[0])
    except (IOError, OSError) as err:
        raise NvmlFault("error", "NVML has no memory figures for this GPU (unified memory) and %s cannot be read: %s"
                        % (path, err)) from err
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        raise NvmlFault("error", "NVML has no memory figures for this GPU (unified memory) and %s names no "
                                 "MemTotal / MemAvailable" % path)
    total, free = fields["MemTotal"], fields["MemAvailable"]
    return {"total": total, "used": total - free, "free": free, "reserved": None, "api": "host_meminfo"}


def _processes(pynvml, handle):
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
        try:
            procs = getattr(pynvml, name)(handle)
        except pynvml.NVMLError_FunctionNotFound:
            continue
        except pynvml.NVMLError_NotSupported:
            return []
        return [{"pid": p.pid, "used_memory": p.usedGpuMemory} for p in procs]
    return []


def read_pynvml(pynvml):
    """Facts from the NVML bindings; raises NvmlFault."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise _fault_for(pynvml, err, "nvmlInit") from err
    try:
        try:
            host = {
                "driver_version": pynvml.nvmlSystemGetDriverVersion(),
                "nvml_version": _optional(pynvml, pynvml.nvmlSystemGetNVMLVersion),
                "cuda_driver_version": _cuda_version(_optional(pynvml, pynvml.nvmlSystemGetCudaDriverVersion_v2)
                                                     or _optional(pynvml, pynvml.nvmlSystemGetCudaDriverVersion)),
            }
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            raise _fault_for(pynvml, err, "system query") from err
        devices = []
        for index in range(count):
            try:
                devices.append(_read_device(pynvml, index))
            except pynvml.NVMLError as err:
                raise _fault_for(pynvml, err, "GPU %d" % index) from err
        handles = _handles(pynvml, count)
        for fact, caps in PEER_FACTS:
            peers = _peers(pynvml, handles, getattr(pynvml, caps)) if handles is not None else [None] * count
            for device, reach in zip(devices, peers):
                device[fact] = reach
        host["devices"] = devices
        return host
    finally:
        with contextlib.suppress(pynvml.NVMLError):   # the facts are read; a failed shutdown changes nothing
            pynvml.nvmlShutdown()


def _nvlink_active_links(pynvml, handle):
    """Active NVLink links of one GPU: 0 on a board without NVLink (NVML answers "not supported" for link 0),
    None where this NVML library has no NVLink query. Links past the device's last answer "invalid argument"."""
    query = getattr(pynvml, "nvmlDeviceGetNvLinkState", None)
    if query is None:
        return None
    active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += 1 if query(handle, link) else 0
        except pynvml.NVMLError_FunctionNotFound:
            return None
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            break
    return active


def _handles(pynvml, count):
    """Every GPU's handle, for the pairwise queries; None where one cannot be had (the peer facts are then unknown)."""
    try:
        return [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
    except pynvml.NVMLError:
        return None


def _peers(pynvml, handles, caps_index):
    """Per GPU, the indices of the GPUs NVML's P2P status answers OK for, for one capability (caps_index); None for
    every GPU where this NVML cannot answer (no such query, or an error: the fact is optional, the budget then goes
    by the links or the board's name)."""
    query = getattr(pynvml, "nvmlDeviceGetP2PStatus", None)
    if query is None:
        return [None] * len(handles)
    try:
        return [[other for other, peer in enumerate(handles)
                 if other != index and _p2p_ok(pynvml, query, handle, peer, caps_index)]
                for index, handle in enumerate(handles)]
    except pynvml.NVMLError:
        return [None] * len(handles)


def _p2p_ok(pynvml, query, handle, other, caps_index):
    try:
        return query(handle, other, caps_index) == pynvml.NVML_P2P_STATUS_OK
    except pynvml.NVMLError_NotSupported:
        return False


# vLLM's custom all-reduce needs peer-to-peer access between every pair of its GPUs (torch.cuda.can_device_access_peer,
# the driver's answer, which NVML's P2P status gives too: "your platform lacks GPU P2P capability", as on GeForce
# cards or in many VMs) and, past two GPUs, NVLink between every pair (platforms/cuda.py is_fully_connected: NVML's
# P2P status by NVML_P2P_CAPS_INDEX_NVLINK); without them the CUDA graphs may capture NCCL's all-reduce. The write
# capability stands for access (pynvml spells the read index as a tuple).
PEER_FACTS = (("nvlink_peers", "NVML_P2P_CAPS_INDEX_NVLINK"), ("p2p_peers", "NVML_P2P_CAPS_INDEX_WRITE"))


def _read_device(pynvml, index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    cc = _optional(pynvml, pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    mig = _optional(pynvml, pynvml.nvmlDeviceGetMigMode, handle)
    device = {
        "index": index,
        "uuid": pynvml.nvmlDeviceGetUUID(handle),
        "name": pynvml.nvmlDeviceGetName(handle),
        "compute_capability": "%d.%d" % tuple(cc) if cc else None,
        "mig_mode": {"current": bool(mig[0]), "pending": bool(mig[1])} if mig else None,
        "nvlink_active_links": _nvlink_active_links(pynvml, handle),
        "processes": _processes(pynvml, handle),
    }
    mem = _memory(pynvml, handle, device["compute_capability"])
    device.update(_memory_fields(mem))
    return device


def _memory_fields(mem):
    """A device's memory_* facts from _memory's or host_memory's figures (memory_api says whose)."""
    return {"memory_" + key: value for key, value in mem.items()}


def _cuda_version(value):
    if not value:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


# ---------------------------------------------------------------- nvidia-smi
SMI_GPU_FIELDS = ("index", "uuid", "name", "driver_version", "memory.total", "memory.used", "memory.free",
                  "memory.reserved", "compute_cap", "mig.mode.current", "mig.mode.pending")
SMI_GPU_FIELDS_OLD = SMI_GPU_FIELDS[:7]
SMI_APP_FIELDS = ("gpu_uuid", "pid", "used_memory")


def smi_fault(text):
    """Map nvidia-smi's failure text to a fault state."""
    lowered = text.lower()
    if "version mismatch" in lowered:
        return NvmlFault("version_mismatch", text.strip())
    if "couldn't communicate with the nvidia driver" in lowered or "driver not loaded" in lowered:
        return NvmlFault("driver_not_loaded", text.strip())
    if "gpu is lost" in lowered or "fallen off the bus" in lowered:
        return NvmlFault("gpu_lost", text.strip())
    if "no devices were found" in lowered:
        return NvmlFault("no_gpus", text.strip())
    if "insufficient permissions" in lowered:
        return NvmlFault("no_permission", text.strip())
    return NvmlFault("error", text.strip() or "nvidia-smi failed")


def _smi_value(raw):
    raw = raw.strip()
    return None if raw in ("[N/A]", "[Not Supported]", "N/A", "") else raw


def _mib(raw):
    value = _smi_value(raw)
    return int(float(value) * MIB) if value is not None else None


def parse_smi_gpus(text, fields):
    devices, drivers = [], set()
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = dict(zip(fields, (c.strip() for c in line.split(","))))
        if len(cols) != len(fields):
            raise NvmlFault("error", "unexpected nvidia-smi line: %r" % line)
        drivers.add(cols["driver_version"])
        mig = _smi_value(cols.get("mig.mode.current", ""))
        pending = _smi_value(cols.get("mig.mode.pending", ""))
        devices.append({
            "index": int(cols["index"]),
            "uuid": cols["uuid"],
            "name": cols["name"],
            "memory_total": _mib(cols["memory.total"]),
            "memory_used": _mib(cols["memory.used"]),
            "memory_free": _mib(cols["memory.free"]),
            "memory_reserved": _mib(cols.get("memory.reserved", "")),
            "memory_api": "nvidia-smi",
            "compute_capability": _smi_value(cols.get("compute_cap", "")),
            "mig_mode": {"current": mig == "Enabled", "pending": pending == "Enabled"} if mig else None,
            "nvlink_active_links": None,
            "nvlink_peers": None,
            "p2p_peers": None,
            "processes": [],
        })
        device = devices[-1]
        if device["memory_total"] is None and device["compute_capability"] in UNIFIED_MEMORY_CAPABILITIES:
            # nvidia-smi prints [N/A] for a unified-memory GPU's memory, as NVML answers "not supported"
            device.update(_memory_fields(host_memory()))
    return devices, sorted(drivers)


def parse_smi_apps(text, devices):
    by_uuid = {d["uuid"]: d for d in devices}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0] in by_uuid:
            by_uuid[parts[0]]["processes"].append({"pid": int(parts[1]), "used_memory": _mib(parts[2])})


def read_smi(run, smi_path):
    """Facts from nvidia-smi; run(cmd) -> (rc, stdout, stderr)."""
    fields = SMI_GPU_FIELDS
    rc, out, err = run([smi_path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc != 0 and "not a valid field" in (out + err):
        fields = SMI_GPU_FIELDS_OLD  # drivers before R510 lack reserved, compute_cap, MIG fields
        rc, out, err = run([smi_path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc != 0:
        raise smi_fault(out + err)
    devices, drivers = parse_smi_gpus(out, fields)
    rc, apps, err = run([smi_path, "--query-compute-apps=" + ",".join(SMI_APP_FIELDS), "--format=csv,noheader,nounits"])
    if rc == 0:
        parse_smi_apps(apps, devices)
    return {"driver_version": drivers[0] if drivers else None, "nvml_version": None,
            "cuda_driver_version": None, "devices": devices}


# ---------------------------------------------------------------- ownership
def process_ancestors(pid, proc_root="/proc"):
    """PIDs from pid up to 1, read from /proc/<pid>/stat."""
    chain = []
    while pid and pid not in chain:
        chain.append(pid)
        try:
            with open(os.path.join(proc_root, str(pid), "stat")) as handle:
                stat = handle.read()
        except (OSError, IOError):
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def summarize(host, engine_pid=None, ancestors=process_ancestors):
    """Add per-GPU memory of the engine (our own service) and of other processes."""
    for device in host["devices"]:
        engine = other = 0
        for proc in device["processes"]:
            mine = bool(engine_pid) and engine_pid in ancestors(proc["pid"])
            proc["engine"] = mine
            if mine:
                engine += proc["used_memory"] or 0
            else:
                other += proc["used_memory"] or 0
        device["engine_memory"] = engine
        device["other_processes_memory"] = other
        device["memory_free_for_engine"] = (device["memory_free"] or 0) + engine
    host["count"] = len(host["devices"])
    host["mig_enabled"] = any((d["mig_mode"] or {}).get("current") for d in host["devices"])
    return host
