# -*- coding: utf-8 -*-
"""ansible-lint with the production profile (.ansible-lint) over the whole collection."""
from ansible_cli import run


def test_ansible_lint_production_profile():
    proc = run("ansible-lint", "--nocolor", "--format=pep8", timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Profile 'production' was required, and it passed." in proc.stdout
