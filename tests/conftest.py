# -*- coding: utf-8 -*-
"""Make the collection importable as ansible_collections.hy3.fleet and the fakes importable.

Under `ansible-test units` the tree already sits at ansible_collections/hy3/fleet and ansible-test
provides the import; a plain pytest run on the checkout gets a temporary symlinked layout.
"""
import os
import signal
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


def _interrupt(signum, _frame):
    raise KeyboardInterrupt("stopped by signal %d" % signum)


def pytest_configure(config):  # pylint: disable=unused-argument
    """A run stopped by SIGTERM or SIGHUP (a CI timeout, a closed terminal) unwinds like Ctrl-C, so session
    fixtures still tear down: the test fleet's namespaces, links, cgroups and state are removed, not left behind."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
