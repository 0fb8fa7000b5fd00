#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvml_facts
short_description: Gather NVIDIA GPU facts (memory, driver, MIG, processes) through NVML
version_added: 0.1.0
description:
  - Reads NVML through the C(pynvml) bindings (PyPI package C(nvidia-ml-py)) on the target host and returns,
    for every GPU, its index, UUID, name, total/used/free/reserved memory in bytes, compute capability,
    MIG mode and the compute processes with their memory, plus the driver, CUDA driver and NVML versions.
  - Memory comes from NVML memory info v2 where the driver has it, so reserved memory is reported; older
    drivers fall back to v1 (reserved is then null). A GPU that shares the host's memory (GB10 / DGX Spark),
    for which NVML has no memory figures, reports the host's C(/proc/meminfo) MemTotal and MemAvailable, as
    CUDA does there (memory_api C(host_meminfo)).
  - When C(pynvml) cannot be imported it runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits)
    instead and says so in RV(ansible_facts.hy3_gpus.source).
  - Faults fail with the remedy in the message and a machine-readable RV(nvml_state) - no NVML library,
    driver not loaded, NVML/kernel module version mismatch after a driver upgrade (reboot or reload the
    nvidia kernel module), a lost GPU, zero GPUs.
author:
  - hy3.fleet maintainers (@hy3-fleet)
requirements:
  - nvidia-ml-py (import name pynvml) on the target, or nvidia-smi on its PATH
extends_documentation_fragment:
  - hy3.fleet.read_only
seealso:
  - module: hy3.fleet.engine_budget
    description: Turns these facts into the per-host memory budget for the engine.
  - module: hy3.fleet.engine_calibration
    description: What engines started on like GPUs measured, for the next budget.
  - name: NVML API reference
    description: The NVIDIA Management Library calls behind these facts.
    link: https://docs.nvidia.com/deploy/nvml-api/
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
options:
  engine_pid:
    description:
      - PID of the running inference engine service (main process). GPU processes that descend from it
        are counted as the engine's own memory, which a restart gives back, instead of as other processes.
    type: int
  nvidia_smi_path:
    description: nvidia-smi to run when pynvml is not importable.
    type: str
    default: nvidia-smi
  prefer:
    description:
      - Source to use. V(auto) uses pynvml and falls back to nvidia-smi only when pynvml is not importable.
    type: str
    choices: [auto, pynvml, nvidia-smi]
    default: auto
"""

EXAMPLES = r"""
- name: Read GPU facts
  hy3.fleet.nvml_facts:

- name: Count our own engine's memory as reclaimable
  hy3.fleet.nvml_facts:
    engine_pid: "{{ engine_main_pid | int }}"

- name: Show free memory per GPU
  ansible.builtin.debug:
    msg: "{{ ansible_facts.hy3_gpus.devices | map(attribute='memory_free') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: success
  type: dict
  contains:
    hy3_gpus:
      description: NVIDIA GPUs of the host and the driver they run on.
      returned: success
      type: dict
      contains:
        source:
          description: Where the facts came from.
          type: str
          sample: pynvml
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: 550.54.15
        cuda_driver_version:
          description: Highest CUDA version the driver supports (null from nvidia-smi).
          type: str
          sample: "12.4"
        nvml_version:
          description: NVML library version (null from nvidia-smi).
          type: str
          sample: 12.550.54.15
        count:
          description: Number of GPUs.
          type: int
          sample: 8
        mig_enabled:
          description: Whether MIG is currently enabled on any GPU.
          type: bool
        devices:
          description:
            - One entry per GPU, in NVML index order.
            - C(nvlink_active_links) counts the GPU's active NVLink links (0 on a PCIe board without NVLink, null
              from nvidia-smi or an NVML without the query); the budget reads it to tell NVLink tensor
              parallelism from PCIe.
            - C(nvlink_peers) lists the indices of the GPUs this one reaches over NVLink, by NVML's P2P status (null
              from nvidia-smi or where NVML cannot answer); the budget takes a tensor-parallel group for NVLink-
              connected only when every pair is, as vLLM does before its own all-reduce serves more than two GPUs.
            - C(p2p_peers) lists the indices of the GPUs this one has peer-to-peer access to (NVML's P2P write status;
              null as above); vLLM's own all-reduce needs it between every pair, so GPUs without it (GeForce cards,
              many VMs) are budgeted with NCCL's all-reduce in their CUDA graphs.
          type: list
          elements: dict
          sample:
            - index: 0
              uuid: GPU-5f3b0e52-7a4c-4d21-9f0e-000000000000
              name: NVIDIA H200
              memory_total: 150754820096
              memory_used: 1048576
              memory_free: 150124150784
              memory_reserved: 629145600
              memory_api: v2
              memory_free_for_engine: 150124150784
              compute_capability: "9.0"
              mig_mode: {current: false, pending: false}
              nvlink_active_links: 18
              nvlink_peers: [1, 2, 3, 4, 5, 6, 7]
              p2p_peers: [1, 2, 3, 4, 5, 6, 7]
              processes: [{pid: 4242, used_memory: 1048576, engine: false}]
              engine_memory: 0
              other_processes_memory: 1048576
nvml_state:
  description: V(ok), or the fault found (library_not_found, driver_not_loaded, version_mismatch, gpu_lost,
    no_permission, no_gpus, no_source, error).
  returned: always
  type: str
  sample: ok
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.hy3.fleet.plugins.module_utils import nvml

try:
    import pynvml
    PYNVML_IMPORT_ERROR = None
except ImportError as exc:  # the nvidia-smi fallback covers it
    pynvml = None
    PYNVML_IMPORT_ERROR = exc


def gather(module):
    prefer = module.params["prefer"]
    if pynvml is not None and prefer != "nvidia-smi":
        return "pynvml", nvml.read_pynvml(pynvml)
    if prefer == "pynvml":
        module.fail_json(msg=missing_required_lib("nvidia-ml-py (import pynvml)"), nvml_state="no_source",
                         exception=str(PYNVML_IMPORT_ERROR))
    smi = module.get_bin_path(module.params["nvidia_smi_path"])
    if not smi:
        raise nvml.NvmlFault("no_source", "pynvml import failed (%s) and %s is not on PATH"
                             % (PYNVML_IMPORT_ERROR, module.params["nvidia_smi_path"]))
    return "nvidia-smi", nvml.read_smi(module.run_command, smi)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_pid=dict(type="int"),
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            prefer=dict(type="str", default="auto", choices=["auto", "pynvml", "nvidia-smi"]),
        ),
        supports_check_mode=True,
    )
    try:
        source, host = gather(module)
        if not host["devices"]:
            raise nvml.NvmlFault("no_gpus", "NVML reports 0 devices")
    except nvml.NvmlFault as fault:
        module.fail_json(msg=str(fault), nvml_state=fault.state)
    host["source"] = source
    nvml.summarize(host, engine_pid=module.params["engine_pid"])
    module.exit_json(changed=False, nvml_state="ok", ansible_facts={"hy3_gpus": host})


if __name__ == "__main__":
    main()
