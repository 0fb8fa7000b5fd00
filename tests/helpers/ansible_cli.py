# -*- coding: utf-8 -*-
"""Run the ansible CLIs of this interpreter's environment against the checkout as hy3.fleet."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/helpers/x.py -> root
BIN = os.path.dirname(sys.executable)


def collections_root():
    """The ansible_collections parent made by tests/conftest.py (first entry holding it on sys.path)."""
    return next(p for p in sys.path if os.path.isdir(os.path.join(p, "ansible_collections", "hy3", "fleet")))


def run(tool, *args, env=None, timeout=600):
    full_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                    ANSIBLE_COLLECTIONS_PATH=collections_root(), ANSIBLE_NOCOLOR="1",
                    ANSIBLE_FORCE_COLOR="0", **(env or {}))
    return subprocess.run([os.path.join(BIN, tool)] + list(args), check=False, cwd=ROOT, env=full_env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
