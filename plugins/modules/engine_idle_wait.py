#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_idle_wait
short_description: Wait, bounded, until a vLLM engine has no running or waiting request
version_added: 0.3.0
description:
  - Polls the engine's C(/metrics) until C(vllm:num_requests_running) and C(vllm:num_requests_waiting) are both
    0, so that a restart drops no request. Run it after taking the host out of the load balancer (the
    rollout's drain hook); requests still arriving keep it waiting.
  - An engine that does not serve (nothing answers C(/health)) has nothing to drain and passes at once. An engine
    that does not answer in time is still there (busy, or hung), so it is polled again, and the wait fails at
    O(timeout) with the status V(unanswered).
  - Fails, changing nothing, when the engine is still busy after O(timeout) seconds or does not export the two
    gauges.
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - hy3.fleet.read_only
seealso:
  - module: hy3.fleet.engine_status
options:
  url:
    description: Base URL of the engine's API, as seen from the host.
    type: str
    default: http://127.0.0.1:8000
  timeout:
    description: Seconds to wait for the engine to become idle.
    type: int
    default: 300
  interval:
    description: Seconds between polls.
    type: float
    default: 2
"""

EXAMPLES = r"""
---
- name: Let the requests in flight finish before the restart
  hy3.fleet.engine_idle_wait:
    url: http://127.0.0.1:8000
    timeout: 600
"""

RETURN = r"""
status:
  description: V(idle), V(not_serving) (nothing to drain), V(busy) (timed out), V(unanswered) (timed out, the
    engine never answered in time) or V(no_metrics).
  returned: always
  type: str
running:
  description: Requests running at the last poll, or null.
  returned: always
  type: int
waiting:
  description: Requests waiting at the last poll, or null.
  returned: always
  type: int
busy_polls:
  description: Polls that found requests in flight, or no answer in time, before it became idle.
  returned: always
  type: int
waited_for_idle:
  description: Seconds waited.
  returned: always
  type: float
msg:
  description: A sentence saying what was found.
  returned: always
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hy3.fleet.plugins.module_utils import vllm_metrics
from ansible_collections.hy3.fleet.plugins.module_utils.engine_probe import TIMED_OUT, ask

ANSWER_SECONDS = 5


def poll(base):
    """(status, load): status idle, busy, unanswered, not_serving or no_metrics.

    An engine that takes longer than ANSWER_SECONDS to answer is still there, most likely busy with the
    very requests the drain waits for (a loaded CPU host): it is polled again, never taken for gone."""
    code, body, why = ask(base + "/metrics", ANSWER_SECONDS)
    if why == TIMED_OUT:
        return "unanswered", vllm_metrics.load("")
    if code != 200:
        health, _body, health_why = ask(base + "/health", ANSWER_SECONDS)
        if health_why == TIMED_OUT:
            return "unanswered", vllm_metrics.load("")
        return ("not_serving" if health != 200 else "no_metrics"), vllm_metrics.load("")
    load = vllm_metrics.load(body)
    if load["running"] is None or load["waiting"] is None:
        return "no_metrics", load
    return ("idle" if vllm_metrics.idle(load) else "busy"), load


BUSY = ("busy", "unanswered")


def wait_idle(base, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    started = clock()
    busy_polls = 0
    while True:
        status, load = poll(base)
        if status not in BUSY or clock() - started >= timeout:
            return dict(load, status=status, busy_polls=busy_polls, waited_for_idle=round(clock() - started, 1))
        busy_polls += 1
        sleep(interval)


def describe(result, timeout):
    if result["status"] == "idle":
        return "the engine is idle (no running or waiting request) after %.1f s" % result["waited_for_idle"]
    if result["status"] == "not_serving":
        return "the engine does not serve: no request to drain"
    if result["status"] == "unanswered":
        return ("the engine did not answer /metrics or /health within %d s for %d s; nothing was changed and the "
                "engine was not restarted. Next step: see why the engine hangs (journalctl, the host's load), or "
                "set hy3_roll_drain_timeout to 0 to restart it without waiting" % (ANSWER_SECONDS, timeout))
    if result["status"] == "no_metrics":
        return ("the engine serves but its /metrics has no vllm:num_requests_running/waiting, so it cannot be "
                "drained safely; nothing was changed. Next step: serve with the metrics endpoint (vLLM has it by "
                "default) or set hy3_roll_drain_timeout to 0 to skip the wait")
    return ("the engine still has %s running and %s waiting requests after %d s; nothing was changed and the engine "
            "was not restarted. Next step: take the host out of the load balancer (drain hook) or raise the drain "
            "timeout, then deploy again" % (result["running"], result["waiting"], timeout))


def main():
    module = AnsibleModule(
        argument_spec=dict(url=dict(type="str", default="http://127.0.0.1:8000"),
                           timeout=dict(type="int", default=300),
                           interval=dict(type="float", default=2)),
        supports_check_mode=True,
    )
    result = wait_idle(module.params["url"].rstrip("/"), module.params["timeout"], module.params["interval"])
    result["msg"] = describe(result, module.params["timeout"])
    if result["status"] in BUSY + ("no_metrics",):
        module.fail_json(**result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
