#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_status
short_description: The vLLM engine's state on a host in one call, for planning a rollout
version_added: 0.3.0
description:
  - Reads, without changing anything, what a rollout needs to know about a host before it decides to touch
    it, in one round trip so that planning a fleet costs about as much as checking it.
  - The engine process (systemd unit state or the PID file's process), the service manager (C(systemctl
    is-system-running) and failed units, systemd mode), who listens on the engine port, the SHA-1 of the files
    a deploy writes, the host's record (the JSON local fact a deploy leaves), the vLLM version of the engine's
    interpreter, and, with O(probe), what the engine itself answers on C(/health), C(/v1/models) (the
    effective C(max_model_len)) and C(/metrics) (running and waiting requests, KV cache usage).
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - hy3.fleet.read_only
seealso:
  - module: hy3.fleet.engine_idle_wait
  - module: hy3.fleet.engine_info
  - module: hy3.fleet.nvml_facts
options:
  mode:
    description: How the engine runs; V(systemd) (a unit) or V(pid) (a control script and PID file).
    type: str
    choices: [systemd, pid]
    default: systemd
  service:
    description: The engine's systemd unit, without C(.service).
    type: str
    default: hy3-engine
  pid_file:
    description: The engine's PID file (pid mode).
    type: path
  port:
    description: The engine's port; its listeners are named, ours or not.
    type: int
    required: true
  files:
    description: Files whose SHA-1 to return (null for a file that does not exist).
    type: list
    elements: path
    default: []
  record:
    description: The host's record, a JSON file; returned parsed.
    type: path
  python:
    description: The engine's interpreter, to read its vLLM version and platform (as M(hy3.fleet.engine_info)).
    type: path
  probe:
    description: Ask the engine at O(url) for its health, its models and its metrics.
    type: bool
    default: true
  url:
    description: Base URL of the engine's API, as seen from the host.
    type: str
    default: http://127.0.0.1:8000
  api_key:
    description: The engine's API key, for C(/v1/models) (C(/health) and C(/metrics) need none).
    type: str
    default: ""
  timeout:
    description: Seconds for each HTTP request.
    type: int
    default: 5
"""

EXAMPLES = r"""
---
- name: Read the engine's state before planning
  hy3.fleet.engine_status:
    mode: systemd
    service: hy3-engine
    port: 8000
    files: [/opt/hy3/etc/vllm.yaml, /opt/hy3/etc/engine.env]
    record: /etc/ansible/facts.d/hy3.fact
    python: /opt/hy3/venv/bin/python
    url: http://127.0.0.1:8000
  register: engine
"""

RETURN = r"""
status:
  description: V(serving) (answers /health), V(running) (its process runs, it does not serve yet or any more) or V(stopped).
  returned: always
  type: str
msg:
  description: A sentence saying the same.
  returned: always
  type: str
engine:
  description: The engine process.
  returned: always
  type: dict
  contains:
    running: {description: "The process runs (a starting unit counts).", type: bool}
    pid: {description: "Its main PID, 0 when not running.", type: int}
    unit_known: {description: "systemd knows the unit (systemd mode).", type: bool}
    active_state: {description: "The unit's ActiveState (systemd mode).", type: str}
    sub_state: {description: "The unit's SubState (systemd mode).", type: str}
    restarts: {description: "How often systemd restarted it (NRestarts).", type: int}
system:
  description: The service manager (systemd mode; V(null) state in pid mode).
  returned: always
  type: dict
  contains:
    state: {description: "C(systemctl is-system-running).", type: str}
    usable: {description: "A deploy can go on (running, degraded or starting).", type: bool}
    failed_units: {description: "Failed units other than the engine's.", type: list, elements: str}
port:
  description: Who listens on O(port).
  returned: always
  type: dict
  contains:
    listeners: {description: "pid, owner (unit or process group), command, ours.", type: list, elements: dict}
    strangers: {description: "Listeners that are not our engine, as \"pid owner command\".", type: list, elements: str}
files:
  description: SHA-1 of each of O(files), null when absent.
  returned: always
  type: dict
record:
  description: The record, parsed; null when absent or unreadable (see RV(record_status)).
  returned: always
  type: dict
record_status:
  description: V(ok), V(absent), V(corrupt) or V(not_asked).
  returned: always
  type: str
package:
  description: The engine's vLLM distribution (as M(hy3.fleet.engine_info) returns it), or status V(not_asked).
  returned: always
  type: dict
serving:
  description: What the engine answered (O(probe)).
  returned: always
  type: dict
  contains:
    status: {description: "V(serving), V(not_serving) or V(not_probed).", type: str}
    healthy: {description: "/health answered 200.", type: bool}
    models: {description: "The served models: id and max_model_len, from /v1/models.", type: list, elements: dict}
    max_model_len: {description: "The first model's effective max_model_len, or null.", type: int}
    running: {description: "Requests running (vllm:num_requests_running), or null.", type: int}
    waiting: {description: "Requests waiting (vllm:num_requests_waiting), or null.", type: int}
    kv_cache_usage: {description: "KV cache usage as a fraction, or null.", type: float}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hy3.fleet.plugins.module_utils import engine_state, vllm_metrics
from ansible_collections.hy3.fleet.plugins.module_utils.engine_package import EnginePackageError, probe as probe_package
from ansible_collections.hy3.fleet.plugins.module_utils.engine_probe import serving_state


def systemd_engine(module, systemctl, service):
    rc, out, _err = module.run_command(engine_state.systemctl_show_args(systemctl, service, engine_state.UNIT_PROPERTIES))
    state = engine_state.parse_show(out, engine_state.UNIT_PROPERTIES) if rc == 0 else {}
    running = state.get("ActiveState") in engine_state.STARTING_OR_RUNNING and state.get("MainPID", 0) > 0
    return {"running": running, "pid": state.get("MainPID", 0) if running else 0,
            "unit_known": state.get("LoadState", "not-found") != "not-found",
            "active_state": state.get("ActiveState"), "sub_state": state.get("SubState"),
            "restarts": state.get("NRestarts", 0)}


def pid_engine(pid_file):
    pid = engine_state.live_pid(pid_file) if pid_file else 0
    return {"running": pid > 0, "pid": pid, "unit_known": False, "active_state": None, "sub_state": None, "restarts": 0}


def systemd_manager(module, systemctl, service):
    _rc, state, _err = module.run_command([systemctl, "is-system-running"])
    _rc, failed, _err = module.run_command([systemctl, "list-units", "--state=failed", "--no-legend", "--plain", "--full"])
    state = state.strip() or "unknown"
    others = [name for name in engine_state.failed_unit_names(failed) if name != "%s.service" % service]
    return {"state": state, "usable": state in engine_state.SYSTEM_USABLE, "failed_units": others}


def port_listeners(module, port, mode, service, engine_pid):
    ss = module.get_bin_path("ss")
    if not ss:
        module.fail_json(msg="engine_status: ss (iproute2) is not installed; it names who holds port %d" % port)
    _rc, out, _err = module.run_command([ss, "-Htlnp", "sport = :%d" % port])
    pids = engine_state.listener_pids(out)
    listeners = []
    if pids:
        field = "unit" if mode == "systemd" else "pgid"
        _rc, ps_out, _err = module.run_command(["ps", "-o", "pid=,%s=,comm=" % field, "-p", ",".join(str(p) for p in pids)])
        listeners = engine_state.port_owners(ps_out, mode, service, engine_pid)
    return {"listeners": listeners,
            "strangers": [engine_state.stranger(item) for item in listeners if not item["ours"]]}


def read_record(path):
    if not path:
        return None, "not_asked"
    if not os.path.exists(path):
        return None, "absent"
    try:
        with open(path) as handle:
            return json.load(handle), "ok"
    except (IOError, OSError, ValueError):
        return None, "corrupt"


def engine_package(module, python):
    if not python:
        return {"status": "not_asked"}
    try:
        return probe_package(module.run_command, python)
    except EnginePackageError as exc:
        return dict(exc.result, msg=str(exc))


def summary(engine, serving):
    if serving.get("healthy"):
        return "serving", "the engine serves"
    if engine["running"]:
        return "running", "the engine process runs but does not serve (starting, or hung)"
    return "stopped", "the engine is not running"


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["systemd", "pid"], default="systemd"),
            service=dict(type="str", default="hy3-engine"),
            pid_file=dict(type="path"),
            port=dict(type="int", required=True),
            files=dict(type="list", elements="path", default=[]),
            record=dict(type="path"),
            python=dict(type="path"),
            probe=dict(type="bool", default=True),
            url=dict(type="str", default="http://127.0.0.1:8000"),
            api_key=dict(type="str", default="", no_log=True),
            timeout=dict(type="int", default=5),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["mode"] == "systemd":
        systemctl = module.get_bin_path("systemctl", required=True)
        engine = systemd_engine(module, systemctl, params["service"])
        system = systemd_manager(module, systemctl, params["service"])
    else:
        engine = pid_engine(params["pid_file"])
        system = {"state": None, "usable": True, "failed_units": []}
    record, record_status = read_record(params["record"])
    if params["probe"]:
        serving = serving_state(params["url"], params["api_key"], params["timeout"])
    else:
        serving = dict(vllm_metrics.load(""), status="not_probed", healthy=False, models=[], max_model_len=None)
    status, msg = summary(engine, serving)
    module.exit_json(
        changed=False, status=status, msg=msg, engine=engine, system=system,
        port=port_listeners(module, params["port"], params["mode"], params["service"], engine["pid"]),
        files={path: module.sha1(path) if os.path.isfile(path) else None for path in params["files"]},
        record=record, record_status=record_status, package=engine_package(module, params["python"]),
        serving=serving)


def main():
    run_module()


if __name__ == "__main__":
    main()
