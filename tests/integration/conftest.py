# -*- coding: utf-8 -*-
"""The sample inventory's stand-in checkpoints (sparse, never committed) for this test session."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session", autouse=True)
def sample_checkpoints(tmp_path_factory):
    """Written into a session directory that examples/inventory reads through HY3_SAMPLE_WEIGHTS."""
    out = os.environ.get("HY3_SAMPLE_WEIGHTS") or str(tmp_path_factory.mktemp("sample-weights"))
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_sample_checkpoints.py"), out], check=True,
                   stdout=subprocess.DEVNULL)
    os.environ["HY3_SAMPLE_WEIGHTS"] = out
    return out
