# -*- coding: utf-8 -*-
"""Make the collection importable as ansible_collections.hy3.fleet and the fakes importable.

Under `ansible-test units` the tree already sits at ansible_collections/hy3/fleet and ansible-test
provides the import; a plain pytest run on the checkout gets a temporary symlinked layout.
"""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collections_root():
    """The directory holding ansible_collections/hy3/fleet: the real one when laid out so."""
    namespace_dir = os.path.dirname(ROOT)
    if os.path.basename(os.path.dirname(namespace_dir)) == "ansible_collections":
        return os.path.dirname(os.path.dirname(namespace_dir))
    path = tempfile.mkdtemp(prefix="hy3-collections-")
    os.makedirs(os.path.join(path, "ansible_collections", "hy3"))
    os.symlink(ROOT, os.path.join(path, "ansible_collections", "hy3", "fleet"))
    return path


sys.path.insert(0, _collections_root())
for _helpers in ("fakes", "helpers"):
    if os.path.join(ROOT, "tests", _helpers) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "tests", _helpers))
