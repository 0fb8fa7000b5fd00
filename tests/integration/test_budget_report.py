# -*- coding: utf-8 -*-
"""The sample inventory (three fake GPU hosts) through the real ansible-playbook."""
import json
import re

import pytest
from ansible_cli import run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("report")
    proc = run("ansible-playbook", "playbooks/budget_report.yml", "-i", "examples/inventory",
               "-e", "hy3_report_dir=%s" % out_dir)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout, out_dir


def row(text, host):
    return re.search(r"(\| %s \|[^\n\"]*)" % host, text).group(1)


def test_each_host_gets_its_own_budget(report):
    out = report[0]
    # weights per GPU as the stand-in checkpoints' headers give them (scripts/make_sample_checkpoints.py), with the
    # 64 MiB rope table built while loading; the engine's overhead modelled for vLLM's defaults on an H200 (8192
    # batched tokens) at tp 8, on an engine of unknown version budgeted as 0.33 (the NVLink communicators' few tenths)
    assert row(out, "gpu-h200-a").endswith("| bf16 | 68.86 | 2.08 (model) | 55.42/40.0 | 1452912 (11.08x) | 131072 | 8 | 8 "
                                           "| 0.9 | 15.42 | yes / yes | fits | budgeted |")
    h100 = row(out, "gpu-h100-b")
    assert "58.52" in h100 and "| int4 | 18.26 |" in h100 and "| 0.73 |" in h100 and "| 122880 |" in h100
    assert h100.endswith("| yes / yes | retreated 3 steps | budgeted |")
    assert row(out, "gpu-a100-c").endswith("| no / no | cannot hold: short by 34.74 GiB per GPU | budgeted |")


def test_report_files_on_the_controller(report):
    out, out_dir = report
    rows = json.loads((out_dir / "fleet_budget.json").read_text())
    assert [r["host"] for r in rows] == ["gpu-h200-a", "gpu-h100-b", "gpu-a100-c"]
    assert rows[2]["verdict"] == "cannot hold" and rows[2]["shortfall_gib"] == 34.74
    assert rows[2]["status"] == "cannot_hold" and rows[1]["status"] == "retreated"
    assert rows[0]["overhead_source"] == "model" and rows[0]["starts"] and rows[0]["meets_target"]
    assert rows[1]["free_gib_per_gpu"][3] == 58.52 and rows[0]["gpus"] == 8
    md = (out_dir / "fleet_budget.md").read_text()
    assert md.startswith("| host | GPUs |") and row(md, "gpu-h200-a") == row(out, "gpu-h200-a")


def test_nothing_changed_on_the_hosts(report):
    out = report[0]
    recap = dict(re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.M))
    assert {h: recap[h] for h in ("gpu-h200-a", "gpu-h100-b", "gpu-a100-c")} == dict.fromkeys(
        ("gpu-h200-a", "gpu-h100-b", "gpu-a100-c"), "0")


def test_serve_keys_the_budget_sets_fail_the_budget_by_name(tmp_path):
    """hy3_serve_extra_config reaches the budget: a key the collection sets stops the host before anything runs."""
    extra = json.dumps({"hy3_report_dir": str(tmp_path), "hy3_serve_extra_config": {"enforce-eager": True}})
    proc = run("ansible-playbook", "playbooks/budget_report.yml", "-i", "examples/inventory", "--limit", "gpu-h200-a",
               "-e", extra)
    assert proc.returncode != 0
    assert "enforce-eager is set by the collection (enforce_eager / hy3_enforce_eager)" in proc.stdout, proc.stdout


def test_module_and_role_docs_render():
    for module in ("hy3.fleet.nvml_facts", "hy3.fleet.engine_budget", "hy3.fleet.engine_log_triage",
                   "hy3.fleet.engine_calibration", "hy3.fleet.engine_info", "hy3.fleet.engine_status",
                   "hy3.fleet.engine_idle_wait", "hy3.fleet.report_files"):
        proc = run("ansible-doc", module)
        assert proc.returncode == 0 and "EXAMPLES" in proc.stdout and "RETURN VALUES" in proc.stdout, proc.stdout
    for role, var in (("budget", "hy3_tiers"), ("serve", "hy3_serve_user"), ("verify", "hy3_verify_timeout"),
                      ("report", "hy3_report_dir"), ("common", "hy3_serve_mode"), ("plan", "hy3_plan"),
                      ("roll", "hy3_roll_drain_timeout")):
        proc = run("ansible-doc", "-t", "role", "hy3.fleet." + role)
        assert proc.returncode == 0 and var in proc.stdout, proc.stdout
