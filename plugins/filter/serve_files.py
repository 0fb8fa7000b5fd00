# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the serve role. Each filter's documentation is in its own file beside this one (desired_files.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_bytes


def _sha1(text):
    """The SHA-1 the template and copy modules report for a file holding text (as the sha1 filter)."""
    return hashlib.sha1(to_bytes(text, errors="surrogate_or_strict")).hexdigest()


def desired_files(files, rendered, content=""):
    """[{name, path, checksum}] of the files a deploy writes.

    files: the managed files, each with name and path, and src when a template writes it; rendered: the text of
    each templated file, in the order of files; content: the text of every file without src.
    """
    rendered = list(rendered)
    templated = [item for item in files if "src" in item]
    if len(rendered) != len(templated):
        raise AnsibleFilterError("desired_files: %d rendered texts for %d templated files" % (len(rendered), len(templated)))
    texts = iter(rendered)
    return [{"name": item["name"], "path": item["path"],
             "checksum": _sha1(next(texts) if "src" in item else content)} for item in files]


class FilterModule(object):
    """hy3.fleet serve filters."""

    def filters(self):
        return {"desired_files": desired_files}
