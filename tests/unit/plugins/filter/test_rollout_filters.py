# -*- coding: utf-8 -*-
"""The filter names playbooks use map to the rollout logic (plugins/module_utils/rollout.py)."""
from ansible_collections.hy3.fleet.plugins.filter.rollout import FilterModule


def test_every_filter_the_roles_call_is_there():
    filters = FilterModule().filters()
    assert sorted(filters) == ["fleet_failures", "fleet_rows", "fleet_status_rows", "fleet_tally", "preflight_problems",
                               "rollout_fault", "rollout_plan"]


def test_rollout_plan_and_rows_through_the_filters():
    filters = FilterModule().filters()
    status = {"files": {"/c": "x"}, "engine": {"running": True}, "serving": {"healthy": True}}
    plan = filters["rollout_plan"]({"fits": True}, status, [{"name": "config", "path": "/c", "checksum": "x"}])
    assert plan["action"] == "steady"
    rows = filters["fleet_rows"](["h"], {"h": {"hy3_plan": plan, "hy3_budget": {"fits": True}}}, False, None)
    assert rows[0]["outcome"] == "steady" and filters["fleet_tally"](rows) == {"steady": 1}
    assert filters["fleet_failures"](rows) == []
