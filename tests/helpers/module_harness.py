# -*- coding: utf-8 -*-
"""Run a module's main() in-process and return what it passed to exit_json/fail_json."""
import contextlib
import json

import pytest
from ansible.module_utils import basic

try:
    from ansible.module_utils.testing import patch_module_args   # ansible-core 2.19+
except ImportError:   # ansible-core 2.18: modules read their arguments from basic._ANSIBLE_ARGS
    @contextlib.contextmanager
    def patch_module_args(args):
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode("utf-8")
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get("msg"))
        self.result = result
        self.failed = failed


def run_module(main, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)

    def exit_json(self, **kwargs):
        raise ModuleExit(kwargs, failed=False)

    def fail_json(self, msg, **kwargs):
        raise ModuleExit(dict(kwargs, msg=msg), failed=True)

    with patch_module_args(json.loads(json.dumps(args))), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(basic.AnsibleModule, "exit_json", exit_json)
        mp.setattr(basic.AnsibleModule, "fail_json", fail_json)
        with pytest.raises(ModuleExit) as caught:
            main()
    return caught.value
