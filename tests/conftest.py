# -*- coding: utf-8 -*-
"""Make the collection importable as ansible_collections.hy3.fleet and the fakes importable."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = tempfile.mkdtemp(prefix="hy3-collections-")
os.makedirs(os.path.join(_COLLECTIONS, "ansible_collections", "hy3"))
os.symlink(ROOT, os.path.join(_COLLECTIONS, "ansible_collections", "hy3", "fleet"))
sys.path.insert(0, _COLLECTIONS)
sys.path.insert(0, os.path.join(ROOT, "tests", "fakes"))
sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
