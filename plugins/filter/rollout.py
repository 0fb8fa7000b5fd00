# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the rollout: plan a host, the fleet report's rows, what fails the run, the fleet status.

The logic lives in plugins/module_utils/rollout.py (pure, unit-tested); these are the names
playbooks call it by.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each filter's documentation is in its own file beside this one (rollout_plan.yml, fleet_rows.yml, ...).

from ansible_collections.hy3.fleet.plugins.module_utils import rollout


def rollout_plan(budget, status, desired, headless=False):
    return rollout.plan_host(budget, status, desired, headless)


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
