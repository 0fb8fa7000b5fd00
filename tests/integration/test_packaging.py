# -*- coding: utf-8 -*-
"""Build the collection tarball, install it into a fresh collections path and render every module's docs."""
import glob
import os
import subprocess

from ansible_cli import BIN, ROOT

MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


def cli(cwd, tool, *args, env=None):
    """Run away from the checkout's ansible.cfg, which finds the collection through .collections."""
    env = dict(os.environ, **(env or {}))
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([os.path.join(BIN, tool)] + list(args), check=False, cwd=str(cwd), text=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)


def test_build_install_and_doc_every_module(tmp_path):
    proc = cli(tmp_path, "ansible-galaxy", "collection", "build", "--output-path", str(tmp_path), ROOT)
    assert proc.returncode == 0, proc.stdout
    tarball = glob.glob(str(tmp_path / "hy3-fleet-*.tar.gz"))
    assert len(tarball) == 1
    dest = tmp_path / "collections"
    env = {"ANSIBLE_COLLECTIONS_PATH": str(dest)}   # only there: molecule/ansible-lint may have installed it elsewhere
    proc = cli(tmp_path, "ansible-galaxy", "collection", "install", "-p", str(dest), tarball[0], env=env)
    assert proc.returncode == 0, proc.stdout
    installed = dest / "ansible_collections" / "hy3" / "fleet"
    assert (installed / "plugins" / "module_utils" / "budget.py").is_file()
    assert not (installed / ".venv").exists()
    assert MODULES == ["engine_budget", "engine_calibration", "engine_idle_wait", "engine_info", "engine_log_triage",
                       "engine_status", "nvml_facts", "report_files"]
    for module in MODULES:
        proc = cli(tmp_path, "ansible-doc", "hy3.fleet." + module, env=env)
        assert proc.returncode == 0 and "RETURN VALUES" in proc.stdout, proc.stdout
    # the old name still resolves, through meta/runtime.yml's redirect, with its deprecation
    proc = cli(tmp_path, "ansible-doc", "hy3.fleet.hy3_budget", env=env)
    assert proc.returncode == 0 and "engine_budget" in proc.stdout, proc.stdout
