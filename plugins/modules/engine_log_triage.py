#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_log_triage
short_description: Wait for a vLLM engine while reading its log, and classify any failure
version_added: 0.1.0
description:
  - Reads the engine log and classifies the first failure into V(weight_loading) (missing shards, no
    config.json, corrupt safetensors, quantization/format mismatch), V(memory_allocation) (CUDA out of memory,
    no memory for the cache blocks, max seq len larger than the KV cache, free memory below the desired
    utilization) or V(request) (the engine is up but requests fail), each with its next step.
  - With O(timeout) above 0 it waits, bounded, until the log says C(Application startup complete.) and
    O(health_url) answers 200, or a failure shows, or the engine process (O(pid_file)) dies.
  - Also returns what the log says about memory (KV cache tokens, KV cache GiB, weights GiB), to compare
    with the budget.
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - hy3.fleet.read_only
options:
  log_path:
    description: The engine log of the current start.
    type: path
    required: true
  health_url:
    description: URL that answers 200 once the engine serves, e.g. C(http://127.0.0.1:8000/health).
    type: str
  pid_file:
    description: PID file of the engine; when the process is gone the wait ends.
    type: path
  timeout:
    description: Seconds to wait for readiness; 0 classifies the log as it is now.
    type: int
    default: 0
  interval:
    description: Seconds between polls.
    type: float
    default: 2
  fail_on_failure:
    description: Fail when a failure class is found or readiness is not reached in time.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Wait for the engine, failing with the log's verdict
  hy3.fleet.engine_log_triage:
    log_path: /var/log/hy3/engine.log
    health_url: http://127.0.0.1:8000/health
    pid_file: /run/hy3/engine.pid
    timeout: 900
"""

RETURN = r"""
ready:
  description: The engine finished startup (and answered on O(health_url) when given).
  returned: always
  type: bool
failure_class:
  description: V(weight_loading), V(memory_allocation), V(request), or null.
  returned: always
  type: str
line:
  description: The decisive log line.
  returned: always
  type: str
line_number:
  description: Its line number.
  returned: always
  type: int
next_step:
  description: What to do about this class of failure.
  returned: always
  type: str
process_alive:
  description: Whether the process in O(pid_file) runs (null without O(pid_file)).
  returned: always
  type: bool
kv_cache_tokens:
  description: KV cache size the engine reported ("GPU/CPU KV cache size N tokens").
  returned: always
  type: int
kv_cache_gib:
  description: '"Available KV cache memory" the engine reported.'
  returned: always
  type: float
weights_gib:
  description: '"Model loading took X GiB" the engine reported.'
  returned: always
  type: float
max_concurrency:
  description: '"Maximum concurrency" the engine reported.'
  returned: always
  type: float
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.hy3.fleet.plugins.module_utils import log_triage


def read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return ""


def process_alive(pid_file):
    try:
        with open(pid_file) as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
        return True
    except (IOError, OSError, ValueError):
        return False


def healthy(url):
    try:
        return open_url(url, timeout=5, validate_certs=False).getcode() == 200
    except Exception:  # any connection error means: not serving yet
        return False


def main():
    module = AnsibleModule(
        argument_spec=dict(
            log_path=dict(type="path", required=True),
            health_url=dict(type="str"),
            pid_file=dict(type="path"),
            timeout=dict(type="int", default=0),
            interval=dict(type="float", default=2),
            fail_on_failure=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 0 or p["interval"] <= 0:
        module.fail_json(msg="timeout must be >= 0 and interval > 0")
    start = time.time()
    while True:
        text = read_text(p["log_path"])
        result = log_triage.classify(text)
        alive = process_alive(p["pid_file"]) if p["pid_file"] else None
        if result["ready"] and p["health_url"]:
            result["ready"] = healthy(p["health_url"])
        done = result["failure_class"] or result["ready"] or alive is False
        if done or time.time() - start >= p["timeout"]:
            break
        time.sleep(p["interval"])
    result.update(process_alive=alive, waited=round(time.time() - start, 1), changed=False)
    if p["fail_on_failure"]:
        if result["failure_class"]:
            module.fail_json(msg=log_triage.describe(result), **result)
        if not result["ready"]:
            tail = [line for line in text.splitlines() if line.strip()][-3:]
            why = "the engine process exited" if alive is False else "not ready after %ss" % p["timeout"]
            module.fail_json(msg="engine startup failed, unclassified: %s; last log lines: %s; next step: read %s"
                                 % (why, " | ".join(tail), p["log_path"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
