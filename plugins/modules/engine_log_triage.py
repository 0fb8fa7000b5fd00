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
    O(health_url) answers 200, or a failure shows, or the engine process dies (O(pid_file) in pid mode,
    O(service) in systemd mode, where the unit stops, fails, or systemd restarts the engine).
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
  service:
    description:
      - systemd unit of the engine; the wait ends when the unit is no longer active or activating, waits to be
        restarted (C(auto-restart)), or its main process changed since the wait began.
      - Mutually exclusive with O(pid_file).
    type: str
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

- name: Wait for the engine of a systemd unit (a crash at start ends the wait at once)
  hy3.fleet.engine_log_triage:
    log_path: /opt/hy3/log/engine.log
    health_url: http://127.0.0.1:8000/health
    service: hy3-engine
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
  description: Whether the engine process (O(pid_file) or O(service)) still runs (null without either).
  returned: always
  type: bool
process_state:
  description: Why the engine is considered gone (a sentence), or null.
  returned: always
  type: str
service_state:
  description: The unit's C(ActiveState), C(SubState), C(MainPID), C(NRestarts) and C(Result) at the last poll.
  returned: when O(service) is given
  type: dict
engine_failed:
  description: The engine's own line saying it failed to start (its core died or never answered), or null; it ends
    the wait even when the API server process lives on.
  returned: always
  type: str
cudagraph_estimate_gib:
  description: The engine's "Estimated CUDA graph memory" (GiB), or null.
  returned: always
  type: float
graph_capture_gib:
  description: What the engine's CUDA-graph capture took ("Graph capturing finished ... took X GiB"), or null.
  returned: always
  type: float
engine_version:
  description: The engine version its log names, or null.
  returned: always
  type: str
max_num_batched_tokens:
  description: The max_num_batched_tokens the engine runs with (its chunked-prefill line), or null.
  returned: always
  type: int
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

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.hy3.fleet.plugins.module_utils import engine_state, log_triage


def read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return ""


def healthy(url):
    try:
        return open_url(url, timeout=5, validate_certs=False).getcode() == 200
    except Exception:  # any connection error means: not serving yet
        return False


class EngineProcess:
    """Answers "is the engine we started waiting for still there?" from a PID file or a systemd unit."""

    def __init__(self, module):
        self.module = module
        self.pid_file = module.params["pid_file"]
        self.service = module.params["service"]
        self.systemctl = module.get_bin_path("systemctl", required=True) if self.service else None
        self.first = self.state = self._service_state() if self.service else None

    def _service_state(self):
        rc, out, err = self.module.run_command(engine_state.systemctl_show_args(self.systemctl, self.service))
        if rc != 0:
            self.module.fail_json(msg="cannot read the state of unit %s: %s" % (self.service, (err or out).strip()))
        return engine_state.parse_show(out)

    def gone(self):
        """None while the engine lives (or nothing is watched), else the reason it is gone."""
        if self.service:
            self.state = self._service_state()
            return engine_state.service_gone(self.first, self.state)
        if self.pid_file and not engine_state.pid_alive(self.pid_file):
            return "the engine process exited"
        return None

    def watched(self):
        return bool(self.service or self.pid_file)


def wait(module, engine):
    """Poll log, health and process until ready, a failure class, a dead engine, or the timeout."""
    p = module.params
    start = time.time()
    while True:
        gone = engine.gone()  # before reading the log: the log of a dead engine is complete
        text = read_text(p["log_path"])
        result = log_triage.classify(text)
        if result["ready"] and p["health_url"]:
            result["ready"] = healthy(p["health_url"])
        if (result["failure_class"] or result["ready"] or result["engine_failed"] or gone
                or time.time() - start >= p["timeout"]):
            break
        time.sleep(p["interval"])
    result.update(process_alive=(gone is None) if engine.watched() else None, process_state=gone,
                  waited=round(time.time() - start, 1), changed=False)
    if engine.service:
        result["service_state"] = engine.state
    return result, text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            log_path=dict(type="path", required=True),
            health_url=dict(type="str"),
            pid_file=dict(type="path"),
            service=dict(type="str"),
            timeout=dict(type="int", default=0),
            interval=dict(type="float", default=2),
            fail_on_failure=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("pid_file", "service")],
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 0 or p["interval"] <= 0:
        module.fail_json(msg="timeout must be >= 0 and interval > 0")
    result, text = wait(module, EngineProcess(module))
    if p["fail_on_failure"]:
        if result["failure_class"]:
            module.fail_json(msg=log_triage.describe(result), **result)
        if not result["ready"]:
            tail = [line for line in text.splitlines() if line.strip()][-3:]
            failed = result["engine_failed"]
            said = "the engine says it failed: %r" % failed if failed else "not ready after %ss" % p["timeout"]
            why = result["process_state"] or said
            module.fail_json(msg="engine startup failed, unclassified: %s; last log lines: %s; next step: read %s"
                                 % (why, " | ".join(tail), p["log_path"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
