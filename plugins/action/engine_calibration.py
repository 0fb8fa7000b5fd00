# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""engine_calibration on the controller: the store is a file there, so when the task runs on the controller
(delegate_to: localhost, local connection, no become) it is read or recorded in this process instead of
shipping the module; anywhere else the module runs as usual. Documentation: plugins/modules/engine_calibration.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.hy3.fleet.plugins.module_utils import calibration
from ansible_collections.hy3.fleet.plugins.modules.engine_calibration import ARGUMENT_SPEC, REQUIRED_IF, store_result


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def _on_controller(self):
        return self._connection.transport == "local" and not self._connection.become

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        if not self._on_controller():
            result.update(self._execute_module(module_name="hy3.fleet.engine_calibration",
                                               module_args=self._task.args, task_vars=task_vars))
            self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        _validation, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF)
        try:
            result.update(store_result(params, bool(self._task.check_mode)))
        except calibration.CalibrationError as err:
            result.update(failed=True, msg="engine_calibration: %s" % err, status="bad_store", entries={}, count=0)
        return result
