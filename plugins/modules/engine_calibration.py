#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_calibration
short_description: Read or record what started engines measured, so like hosts budget with it
version_added: 0.2.0
description:
  - Keeps the calibration store, one JSON file on the controller (fit to commit beside an inventory), of the
    memory vLLM engines really took beyond their weights, keyed by what fixes that amount - GPU model, engine
    version, model and tier, tensor parallel size, C(max_num_batched_tokens), C(max_num_seqs),
    C(enforce_eager), KV cache dtype and the model's C(dtype), and where the engine's further config sets them its
    CUDA-graph capture cap, async scheduling and speculative tokens.
  - With O(state=read) it returns the entries for M(hy3.fleet.engine_budget), which uses an entry only for a
    setting with exactly its key; with O(state=record) it adds the measurement of one host (what
    M(hy3.fleet.engine_log_triage) read from its engine's log) and the budget that host got.
  - An absent store is empty; a corrupt one fails naming the file and is never reset.
  - "Run it on the controller (C(delegate_to: localhost); C(run_once) for reading). There, with the local
    connection and no become, an action plugin reads or records the store in Ansible's own process, with no
    module sent; elsewhere the module runs as any other."
author:
  - hy3.fleet maintainers (@hy3-fleet)
seealso:
  - module: hy3.fleet.engine_budget
  - module: hy3.fleet.engine_log_triage
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode a record says whether it would change the store and writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
options:
  path:
    description: The calibration store (JSON).
    type: path
    required: true
  state:
    description: V(read) the entries, or V(record) one measurement.
    type: str
    choices: [read, record]
    default: read
  key:
    description:
      - The calibration key of the deployed setting, as RV(hy3.fleet.engine_budget#module:calibration_fields) returns it.
      - Required with O(state=record).
    type: dict
  engine:
    description:
      - What the engine printed, as M(hy3.fleet.engine_log_triage) returns it (C(weights_gib), C(kv_cache_gib),
        C(kv_cache_tokens), C(max_concurrency), C(cudagraph_estimate_gib), C(graph_capture_gib)).
      - Required with O(state=record).
    type: dict
  budget:
    description:
      - The budget table in bytes the host was deployed with (RV(hy3.fleet.engine_budget#module:budget_bytes)).
      - Required with O(state=record).
    type: dict
  host:
    description: The host that measured, for the report.
    type: str
  measured_at:
    description: When it was measured (ISO 8601), for the report.
    type: str
"""

EXAMPLES = r"""
---
- name: Read the calibration store on the controller
  hy3.fleet.engine_calibration:
    path: "{{ inventory_dir }}/hy3-calibration.json"
  delegate_to: localhost
  run_once: true
  register: calibration

- name: Record what this host's engine measured
  hy3.fleet.engine_calibration:
    path: "{{ inventory_dir }}/hy3-calibration.json"
    state: record
    key: "{{ hy3_budget.calibration_fields }}"
    engine: "{{ hy3_verify_startup }}"
    budget: "{{ hy3_budget.budget_bytes }}"
    host: "{{ inventory_hostname }}"
    measured_at: "{{ now(utc=true).isoformat() }}"
  delegate_to: localhost
"""

RETURN = r"""
entries:
  description: The store's entries by key, each with C(key), C(overhead_bytes), C(host), C(measured_at) and C(engine).
  returned: always
  type: dict
count:
  description: Number of entries in the store.
  returned: always
  type: int
measurement:
  description:
    - The measured breakdown beside the prediction, with C(status) V(measured), V(not_measured) (the log has no
      memory lines, so the model stays in use) or V(explicit_kv) (the KV cache size was set by hand).
    - C(kv_measured_from) says where the engine's KV memory was read, V(tokens) (its token count at the budget's
      bytes a token, exact to a block) or V(gib_line) (its "Available KV cache memory" line, where the token count
      disagrees with it, the engine counting tokens otherwise for that model).
  returned: with O(state=record)
  type: dict
status:
  description: V(read), V(recorded), V(unchanged), V(not_measured) or V(explicit_kv); V(bad_store) on failure.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hy3.fleet.plugins.module_utils import calibration

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", choices=["read", "record"], default="read"),
    key=dict(type="dict", no_log=False),
    engine=dict(type="dict"),
    budget=dict(type="dict"),
    host=dict(type="str"),
    measured_at=dict(type="str"),
)


REQUIRED_IF = [("state", "record", ("key", "engine", "budget"))]


def record(params, store, check_mode):
    measurement = calibration.measure(params["engine"], params["budget"])
    updated, changed = calibration.record_entry(store, params["key"], measurement, params["host"],
                                                params["measured_at"])
    if changed and not check_mode:
        calibration.save_store(params["path"], updated)
    status = "recorded" if changed else ("unchanged" if measurement["status"] == calibration.MEASURED
                                         else measurement["status"])
    return dict(changed=changed, entries=updated["entries"], count=len(updated["entries"]),
                measurement=measurement, status=status)


def store_result(params, check_mode):
    """The result for validated params; raises calibration.CalibrationError (the action plugin shares it)."""
    store = calibration.load_store(params["path"])
    if params["state"] == "record":
        return record(params, store, check_mode)
    return dict(changed=False, entries=store["entries"], count=len(store["entries"]), status="read")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, required_if=REQUIRED_IF)
    try:
        result = store_result(module.params, module.check_mode)
    except calibration.CalibrationError as err:
        module.fail_json(msg="engine_calibration: %s" % err, status="bad_store", entries={}, count=0)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
