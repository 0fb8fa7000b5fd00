# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: report_files
short_description: Write a report's files into a directory on the controller, in one step
version_added: 0.3.0
description:
  - Writes each of O(files) (a file name and its text) into O(dir) on the controller, creating the directory
    when it is missing. Each file is replaced atomically, and only when its text differs.
  - The files are the run's output on the controller, not a change to a host; they are written also in check
    mode and the result is never V(changed). The fleet report (role C(hy3.fleet.report)) and
    C(playbooks/fleet_status.yml) use it for their Markdown and JSON.
  - An action plugin that runs on the controller itself, not a module sent to a host, so it costs no round
    trip; C(delegate_to), the connection and C(become) do not change where it writes or as whom (the user
    who runs Ansible).
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: The report is written also in check mode (it is the run's output) and never reported as changed.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  dir:
    description: The directory on the controller; created (with O(dir_mode)) when missing.
    type: path
    required: true
  files:
    description:
      - File name (no directory part) to the text it holds.
    type: dict
    required: true
  mode:
    description: Permissions of each file written.
    type: raw
    default: "0644"
  dir_mode:
    description: Permissions of O(dir) (set also when it exists).
    type: raw
    default: "0755"
seealso:
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
---
- name: Write the report as Markdown and JSON on the controller
  hy3.fleet.report_files:
    dir: "{{ playbook_dir }}/hy3-report"
    files:
      fleet_budget.json: "{{ rows | to_nice_json }}\n"
      fleet_budget.md: "{{ lookup('ansible.builtin.template', 'fleet_budget.md.j2') }}"
  run_once: true
"""

RETURN = r"""
paths:
  description: The files, as written, in the order of O(files).
  returned: success
  type: list
  elements: str
  sample: [/work/hy3-report/fleet_budget.json, /work/hy3-report/fleet_budget.md]
written:
  description: The files whose text changed (or that were new) and were written this time.
  returned: success
  type: list
  elements: str
"""
