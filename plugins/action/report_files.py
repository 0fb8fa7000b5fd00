# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a report's files on the controller, in the controller's own process (no module round trip).

Documentation: plugins/modules/report_files.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = dict(
    dir=dict(type="path", required=True),
    files=dict(type="dict", required=True),
    mode=dict(type="raw", default="0644"),
    dir_mode=dict(type="raw", default="0755"),
)


def _mode(value):
    """0644, "0644" or "644" -> 0o644 (a string is octal, as the file modules read it)."""
    return value if isinstance(value, int) else int(str(value), 8)


def _make_dir(path, mode):
    """Create path and any missing parent with mode (as the file module does), set mode on path."""
    missing = []
    head = path
    while head and not os.path.isdir(head):
        missing.append(head)
        head = os.path.dirname(head)
    for directory in reversed(missing):
        os.mkdir(directory)
        os.chmod(directory, mode)
    os.chmod(path, mode)


def _write(path, data, mode):
    """Replace path with data atomically when its bytes differ; True when written."""
    try:
        with open(path, "rb") as handle:
            same = handle.read() == data
    except (IOError, OSError):
        same = False
    if not same:
        handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path))
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(tmp, mode)
            os.rename(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    os.chmod(path, mode)
    return not same


class ActionModule(ActionBase):
    """Runs on the controller; writes also in check mode (the report is the run's output)."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        directory = args["dir"]
        for name in args["files"]:
            if not name or name in (".", "..") or "/" in name:
                return dict(result, failed=True, msg="report_files: %r is not a plain file name" % name)
        try:
            mode, dir_mode = _mode(args["mode"]), _mode(args["dir_mode"])
        except ValueError as exc:
            return dict(result, failed=True, msg="report_files: not an octal mode: %s" % exc)
        paths, written = [], []
        try:
            _make_dir(directory, dir_mode)
            for name, text in args["files"].items():
                path = os.path.join(directory, name)
                paths.append(path)
                if _write(path, to_bytes(to_text(text), errors="surrogate_or_strict"), mode):
                    written.append(path)
        except (IOError, OSError) as exc:
            return dict(result, failed=True, msg="report_files: cannot write %s: %s" % (directory, exc),
                        paths=paths, written=written)
        return dict(result, changed=False, paths=paths, written=written)
