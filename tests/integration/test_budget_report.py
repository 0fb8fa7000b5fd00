# -*- coding: utf-8 -*-
"""The sample inventory (three fake GPU hosts) through the real ansible-playbook."""
import re

import pytest
from ansible_cli import run


@pytest.fixture(scope="module")
def report():
    proc = run("ansible-playbook", "playbooks/budget_report.yml", "-i", "examples/inventory")
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def row(report, host):
    return re.search(r'"(%s \|[^"]*)"' % host, report).group(1)


def test_each_host_gets_its_own_budget(report):
    assert row(report, "gpu-h200-a").endswith("| bf16 | weights 69.38 GiB | KV 52.98/40.0 GiB | len 131072 | "
                                              "seqs 8 | tp 8 | util 0.9 | headroom 12.98 GiB | fits")
    h100 = row(report, "gpu-h100-b")
    assert "| fp8 |" in h100 and "| util 0.73 |" in h100 and h100.endswith("retreated 2 steps")
    assert row(report, "gpu-a100-c") == "gpu-a100-c | 4 x NVIDIA A100-SXM4-40GB | cannot hold: short by 39.63 GiB per GPU"


def test_nothing_changed(report):
    assert re.findall(r"changed=(\d+)", report) == ["0"] * 4


def test_module_docs_render():
    for module in ("hy3.fleet.nvml_facts", "hy3.fleet.hy3_budget"):
        proc = run("ansible-doc", module)
        assert proc.returncode == 0 and "EXAMPLES" in proc.stdout and "RETURN VALUES" in proc.stdout, proc.stdout
    proc = run("ansible-doc", "-t", "role", "hy3.fleet.budget")
    assert proc.returncode == 0 and "hy3_tiers" in proc.stdout, proc.stdout
