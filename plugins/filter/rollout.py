# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the rollout: plan a host, the fleet report's rows, what fails the run, the fleet status.

The logic lives in plugins/module_utils/rollout.py (pure, unit-tested); these are the names
playbooks call it by.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: rollout_plan
short_description: The rollout group of one host (steady, roll, cannot_hold) from its budget, state and files
version_added: 0.3.0
description:
  - Compares the files the serve role would write (their SHA-1) with what the host has (M(hy3.fleet.engine_status)),
    and looks at the engine and the budget's verdict. Returns C(action), C(reasons) (codes) and a C(sentence).
  - Also provides C(rollout_fault) (the plan of a host whose planning failed), C(preflight_problems), C(fleet_rows)
    (rows of the fleet report), C(fleet_tally), C(fleet_failures) (what fails the run) and C(fleet_status_rows)
    (rows of playbooks/fleet_status.yml).
positional: budget, status, desired
options:
  _input:
    description: The budget (M(hy3.fleet.engine_budget)'s result).
    type: dict
    required: true
  status:
    description: M(hy3.fleet.engine_status)'s result.
    type: dict
    required: true
  desired:
    description: The files a deploy would write, each with C(name), C(path) and C(checksum).
    type: list
    elements: dict
    required: true
author:
  - hy3.fleet maintainers (@hy3-fleet)
"""

EXAMPLES = r"""
---
- name: Plan this host
  ansible.builtin.set_fact:
    hy3_plan: "{{ hy3_budget | hy3.fleet.rollout_plan(hy3_engine_status, desired_files) }}"

- name: The fleet report's rows
  ansible.builtin.set_fact:
    rows: "{{ groups['gpu_nodes'] | hy3.fleet.fleet_rows(hostvars, ansible_check_mode) }}"
"""

RETURN = r"""
_value:
  description: C(action) (V(steady), V(roll), V(cannot_hold)), C(reasons) and C(sentence).
  type: dict
"""

from ansible_collections.hy3.fleet.plugins.module_utils import rollout


def rollout_plan(budget, status, desired):
    return rollout.plan_host(budget, status, desired)


def rollout_fault(result, task, host):
    return rollout.fault(result, task, host)


def preflight_problems(status, host, mode, port):
    return rollout.preflight_problems(status, host, mode, port)


def fleet_rows(hosts, hostvars, check_mode=False, stopped_by=None):
    return rollout.report_rows(hosts, hostvars, check_mode, stopped_by)


def fleet_status_rows(hosts, hostvars):
    return rollout.status_rows(hosts, hostvars)


def fleet_failures(rows, check_mode=False):
    return rollout.run_failures(rows, check_mode)


def fleet_tally(rows):
    return rollout.tally(rows)


class FilterModule(object):
    """hy3.fleet rollout filters."""

    def filters(self):
        return {
            "rollout_plan": rollout_plan,
            "rollout_fault": rollout_fault,
            "preflight_problems": preflight_problems,
            "fleet_rows": fleet_rows,
            "fleet_failures": fleet_failures,
            "fleet_status_rows": fleet_status_rows,
            "fleet_tally": fleet_tally,
        }
