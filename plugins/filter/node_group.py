# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of node groups (one engine across nodes): the group of a host, its GPUs, its plan, its waves.

The logic lives in plugins/module_utils/node_group.py (pure, unit-tested); these are the names
playbooks call it by. A group that cannot be planned fails the task with the member and the cause.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each filter's documentation is in its own file beside this one (node_group.yml, node_group_gpus.yml, ...).

from ansible.errors import AnsibleFilterError

from ansible_collections.hy3.fleet.plugins.module_utils import node_group as groups


def _checked(function, *args):
    try:
        return function(*args)
    except groups.GroupError as error:
        raise AnsibleFilterError(str(error)) from None


def node_group(host, hostvars, inventory_hosts, play_hosts):
    return _checked(groups.group_info, host, hostvars, inventory_hosts, play_hosts)


def node_group_gpus(info, hostvars):
    return _checked(groups.group_gpus, info, hostvars)


def node_group_gpu_problem(info, hostvars):
    return groups.gpu_problem(info, hostvars)


def node_group_plan(info, hostvars):
    return groups.group_plan(info, hostvars)


def node_group_waves(hosts, hostvars):
    return groups.roll_waves(hosts, hostvars)


def node_group_wave_problem(info, batch):
    return groups.wave_problem(info, batch)


def node_group_failures(info, hostvars, batch, key="__hy3_roll_member_failure"):
    return groups.member_failures(info, hostvars, batch, key)


class FilterModule(object):
    """hy3.fleet node group filters."""

    def filters(self):
        return {
            "node_group": node_group,
            "node_group_gpus": node_group_gpus,
            "node_group_gpu_problem": node_group_gpu_problem,
            "node_group_plan": node_group_plan,
            "node_group_waves": node_group_waves,
            "node_group_wave_problem": node_group_wave_problem,
            "node_group_failures": node_group_failures,
        }
