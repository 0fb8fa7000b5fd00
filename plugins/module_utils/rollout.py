# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""The rollout's decisions, pure: which group a host lands in, what the fleet report says, what fails the run.

A plan puts every host in one group: ``steady`` (the files it would get are the files it has and the
engine serves), ``roll`` (something differs, or the engine does not serve), ``cannot_hold`` (the budget's
verdict) or ``faulted`` (unreachable, an NVML fault, a preflight check, a broken checkpoint). Only ``roll``
hosts are touched. The fleet report then gives each host one outcome beside a sentence.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Plan actions, and the outcome each leads to when nothing else happened to the host.
STEADY, ROLL, CANNOT_HOLD, FAULTED = "steady", "roll", "cannot_hold", "faulted"

# What the files a deploy writes are called in reasons and sentences.
FILE_WORDS = {"config": "vLLM config", "environment": "environment", "script": "control script",
              "unit": "systemd unit", "driver": "driver"}

# Outcomes that fail the run (after the report is written); cannot_hold only outside --check.
FAILING_OUTCOMES = ("failed", "faulted", "no_plan")


def preflight_problems(status, host, mode, port):
    """Sentences naming what stops a deploy on this host (empty: go on); nothing was changed by then.

    status: what hy3.fleet.engine_status returned for the host.
    """
    problems = []
    system = status.get("system") or {}
    if mode == "systemd":
        failed = system.get("failed_units") or []
        if not system.get("usable", False) or failed:
            usable = system.get("usable", False)
            problems.append(
                "%s: systemd is %s%s; nothing was changed. Next step: %s, then deploy again." % (
                    host, system.get("state") or "unknown",
                    (", failed units: " + ", ".join(failed)) if failed else "",
                    "repair those units or clear them with systemctl reset-failed (systemctl --failed, journalctl -u UNIT)"
                    if usable else
                    "boot the host with systemd as PID 1 (or set hy3_serve_mode=pid on hosts without systemd)"))
    strangers = (status.get("port") or {}).get("strangers") or []
    if strangers:
        problems.append(
            "%s: port %s is taken by another process (%s); nothing was changed. Next step: stop that process or set "
            "hy3_serve_port to a free port." % (host, port, "; ".join(strangers)))
    return problems


def file_reasons(desired, current):
    """Reasons from the files a deploy would write (name, path, checksum) against their checksums now."""
    absent = [item for item in desired if current.get(item["path"]) is None]
    if desired and len(absent) == len(desired):
        return ["not_deployed"]
    return ["%s_changed" % item["name"] for item in desired if current.get(item["path"]) != item["checksum"]]


def plan_host(budget, status, desired, headless=False):
    """The plan for one host: action, reasons (codes) and a sentence.

    budget: hy3.fleet.engine_budget's result; status: hy3.fleet.engine_status's; desired: the files the serve
    role would write, each {name, path, checksum} (checksum: SHA-1 of the rendered content). headless: a node
    group's member other than the head, which runs the engine's workers and answers no HTTP (its group serves
    through the head).
    """
    if not budget.get("fits"):
        return {"action": CANNOT_HOLD, "reasons": [budget.get("status") or "cannot_hold"],
                "sentence": budget.get("reason") or budget.get("verdict") or "the budget says this host cannot hold the model"}
    reasons = file_reasons(desired, status.get("files") or {})
    engine = status.get("engine") or {}
    if not engine.get("running"):
        reasons.append("engine_stopped")
    elif not headless and not (status.get("serving") or {}).get("healthy"):
        reasons.append("engine_not_serving")
    if not reasons:
        return {"action": STEADY, "reasons": [], "sentence": "runs the config it would get, and serves"}
    return {"action": ROLL, "reasons": reasons, "sentence": "to roll: " + ", ".join(describe_reason(r) for r in reasons)}


def describe_reason(reason):
    if reason == "not_deployed":
        return "never deployed"
    if reason == "engine_stopped":
        return "the engine is not running"
    if reason == "engine_not_serving":
        return "the engine does not serve"
    name = reason[:-len("_changed")] if reason.endswith("_changed") else reason
    return "%s changed" % FILE_WORDS.get(name, name)


def fault(result, task, host):
    """The plan of a host whose planning failed: result is ansible_failed_result, task the failed task's name."""
    result = result or {}
    if result.get("unreachable"):
        code = "unreachable"
    elif result.get("nvml_state"):
        code = "nvml_%s" % result["nvml_state"]
    elif result.get("status") and isinstance(result.get("status"), str):
        code = result["status"]
    else:
        code = "failed"
    msg = result.get("msg") or "failed at %s" % task
    if not msg.startswith(host + ":"):
        msg = "%s: %s" % (host, msg)
    return {"action": FAULTED, "reasons": [code], "sentence": msg, "task": task}


def _get(mapping, key, default=None):
    try:
        value = mapping[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def outcome(plan, roll, check_mode, stopped_by, budget=None):
    """(outcome, sentence) of one host: what the rollout did with it and why.

    A host with a budget and no plan was only budgeted (budget_report.yml); with neither it was unreachable
    or failed before it was planned.
    """
    if not plan:
        if budget:
            return "budgeted", budget.get("verdict") or ""
        return "no_plan", "no plan: unreachable, or failed before it was planned (see its error above)"
    action = plan.get("action")
    if action == FAULTED:
        return "faulted", "skipped: %s" % plan.get("sentence")
    if action == CANNOT_HOLD:
        return "cannot_hold", "skipped: %s" % plan.get("sentence")
    if action == STEADY:
        return "steady", "nothing to change: %s" % plan.get("sentence")
    if check_mode:
        return "would_roll", "would roll (--check): %s" % plan.get("sentence")[len("to roll: "):]
    if roll:
        return roll.get("status", "failed"), roll.get("sentence", "")
    return "not_rolled", ("not rolled: the rollout stopped at %s" % stopped_by if stopped_by
                          else "not rolled: the rollout did not reach it")


def report_row(host, hostvars, check_mode=False, stopped_by=None):
    """One row of the fleet report from a host's variables (budget, GPU facts, plan, roll result, exposure)."""
    budget = _get(hostvars, "hy3_budget", {})
    gpus = _get(_get(hostvars, "ansible_facts", {}), "hy3_gpus", {})
    table = _get(budget, "budget_gib", {})
    devices = _get(gpus, "devices", [])
    exposure = _get(hostvars, "hy3_serve_exposure", {})
    plan = _get(hostvars, "hy3_plan")
    row_outcome, why = outcome(plan, _get(hostvars, "hy3_roll"), check_mode, stopped_by, budget)
    return {
        "host": host,
        "gpus": _get(gpus, "count"),
        "gpu_model": _get(devices[0], "name") if devices else None,
        "driver_version": _get(gpus, "driver_version"),
        "free_gib_per_gpu": _get(budget, "free_gib_per_gpu"),
        "quantization": _get(budget, "quantization"),
        "weights_gib": _get(table, "weights"),
        "kv_available_gib": _get(table, "kv_available"),
        "kv_needed_gib": _get(table, "kv_needed"),
        "kv_cache_tokens": _get(budget, "kv_cache_tokens"),
        "max_model_len": _get(budget, "max_model_len"),
        "max_num_seqs": _get(budget, "max_num_seqs"),
        "tensor_parallel_size": _get(budget, "tensor_parallel_size"),
        "pipeline_parallel_size": _get(budget, "pipeline_parallel_size", 1),
        "nodes_needed": _get(budget, "nodes_needed"),
        "gpu_memory_utilization": _get(budget, "gpu_memory_utilization"),
        "headroom_gib": _get(table, "headroom"),
        "overhead_gib": _get(table, "overhead"),
        "overhead_source": _get(table, "overhead_source"),
        "calibrated_by": _get(table, "calibrated_by"),
        "max_concurrency": _get(budget, "max_concurrency"),
        "starts": _get(budget, "starts"),
        "starts_certainty": _get(budget, "starts_certainty"),
        "meets_target": _get(budget, "meets_target"),
        "engine_version": _get(_get(budget, "engine", {}), "version"),
        "status": _get(budget, "status", "no_budget"),
        "verdict": _get(budget, "verdict", "no budget: %s" % (_get(plan, "sentence") or "facts or budget failed")),
        "shortfall_gib": _get(budget, "shortfall_gib"),
        "reason": _get(budget, "reason", _get(budget, "utilization_note")),
        "exposure": _get(exposure, "status"),
        "exposure_note": _get(exposure, "sentence"),
        "plan": _get(plan, "action"),
        "plan_reasons": _get(plan, "reasons", []),
        "outcome": row_outcome,
        "why": why,
    }


# When the members of a node group end differently (they should not), the group's row takes the worst.
OUTCOME_SEVERITY = ("failed", "faulted", "no_plan", "cannot_hold", "not_rolled", "would_roll", "budgeted", "rolled",
                    "steady")


def report_rows(hosts, hostvars, check_mode=False, stopped_by=None):
    """Rows for every host of the rollout, in inventory order; a node group is one row, where its head is."""
    rows = [report_row(host, _get(hostvars, host, {}), check_mode, stopped_by) for host in hosts]
    return collapse_groups(rows, hosts, hostvars, merge_report_rows)


def collapse_groups(rows, hosts, hostvars, merge):
    """rows (one per host, in hosts' order) with each node group's members merged into one row by merge(rows)."""
    by_group, order = {}, []
    for host, row in zip(hosts, rows):
        name = _get(_get(hostvars, host, {}), "hy3_node_group", "")
        key = name or (None, host)
        if key not in by_group:
            by_group[key] = []
            order.append(key)
        by_group[key].append(row)
    return [by_group[key][0] if isinstance(key, tuple) else merge(key, by_group[key]) for key in order]


def _worst(rows, field="outcome", severity=OUTCOME_SEVERITY):
    return min(rows, key=lambda row: severity.index(row[field]) if row[field] in severity else len(severity))


def merge_report_rows(name, rows):
    """One report row for node group name: the head's budget (the group's), GPUs summed over the members,
    the worst outcome with its reason (prefixed by the member when it is not the head)."""
    head, worst = rows[0], _worst(rows)
    merged = dict(head, host=name, node_group=name, members=[row["host"] for row in rows],
                  gpus=sum(row["gpus"] or 0 for row in rows), outcome=worst["outcome"])
    merged["why"] = worst["why"] if worst is head or worst["why"] == head["why"] else "%s: %s" % (worst["host"], worst["why"])
    return merged


def tally(rows):
    """{outcome: count}, for the report's summary line."""
    counts = {}
    for row in rows:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    return counts


def run_failures(rows, check_mode=False):
    """Sentences for the hosts that make the run fail: rollout failures and faults, and hosts that cannot hold
    the model outside --check (they were to be served)."""
    failing = FAILING_OUTCOMES + (() if check_mode else ("cannot_hold",))
    return ["%s: %s" % (row["host"], row["why"]) for row in rows if row["outcome"] in failing]


def status_row(host, hostvars, headless=False):
    """One row of fleet_status.yml: the engine as it runs, beside the host's record, and the drift between them.

    drift codes: no_record, config_changed (vllm.yaml is not what the record says was deployed),
    max_model_len (the engine serves another one than recorded), driver_changed (the driver is not the one
    the engine was started on), not_serving (for a node group's member other than the head, which answers no
    HTTP: not_running, its engine's process is gone).
    """
    status = _get(hostvars, "hy3_engine_status", {})
    record = _get(status, "record")
    serving = _get(status, "serving", {})
    gpus = _get(_get(hostvars, "ansible_facts", {}), "hy3_gpus", {})
    files = _get(status, "files", {})
    config = next((checksum for path, checksum in files.items() if path.endswith("/etc/vllm.yaml")), None)
    drift = []
    if not status:
        state, drift = "unknown", ["unreachable"]
    else:
        if not record:
            drift.append("no_record")
        else:
            if config != record.get("config_checksum"):
                drift.append("config_changed")
            served = _get(serving, "max_model_len")
            if served is not None and str(served) != str(record.get("max_model_len")):
                drift.append("max_model_len")
            if gpus.get("driver_version") and gpus.get("driver_version") != record.get("driver_version"):
                drift.append("driver_changed")
        if headless:
            if not _get(_get(status, "engine", {}), "running", False):
                drift.append("not_running")
        elif not _get(serving, "healthy", False):
            drift.append("not_serving")
        state = "ok" if not drift else ("down" if {"not_serving", "not_running"} & set(drift) else "drift")
    return {
        "host": host,
        "state": state,
        "drift": drift,
        "engine": _get(status, "status"),
        "max_model_len_served": _get(serving, "max_model_len"),
        "max_model_len_recorded": _get(record, "max_model_len") if record else None,
        "running": _get(serving, "running"),
        "waiting": _get(serving, "waiting"),
        "kv_cache_usage": _get(serving, "kv_cache_usage"),
        "quantization": _get(record, "quantization") if record else None,
        "engine_version": _get(_get(status, "package", {}), "version"),
        "driver_version": _get(gpus, "driver_version"),
        "driver_recorded": _get(record, "driver_version") if record else None,
        "nvml_fault": _get(hostvars, "hy3_status_nvml_fault"),
    }


STATE_SEVERITY = ("unknown", "down", "drift", "ok")


def status_rows(hosts, hostvars):
    """fleet_status.yml's rows, in inventory order; a node group is one row."""
    rows = []
    for host in hosts:
        own = _get(hostvars, host, {})
        name = _get(own, "hy3_node_group", "")
        headless = bool(name) and [h for h in hosts if _get(_get(hostvars, h, {}), "hy3_node_group", "") == name][0] != host
        rows.append(status_row(host, own, headless))
    return collapse_groups(rows, hosts, hostvars, merge_status_rows)


def merge_status_rows(name, rows):
    """One status row for node group name: the head's engine numbers, the worst state, every member's drift
    (prefixed by the member when it is not the head)."""
    head = rows[0]
    drift = list(head["drift"]) + ["%s:%s" % (row["host"], code) for row in rows[1:] for code in row["drift"]]
    return dict(head, host=name, node_group=name, members=[row["host"] for row in rows],
                state=_worst(rows, "state", STATE_SEVERITY)["state"], drift=drift)
