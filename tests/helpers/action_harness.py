# -*- coding: utf-8 -*-
"""Run an action plugin's run() without a playbook: a task with args, a connection of a given transport."""
from unittest.mock import MagicMock


def action(plugin_class, args, transport="local", become=None, check_mode=False):
    task = MagicMock(args=args, async_val=0, check_mode=check_mode, diff=False)
    connection = MagicMock(transport=transport, become=become)
    connection._shell.tmpdir = None
    plugin = plugin_class(task, connection, MagicMock(), MagicMock(), MagicMock(), MagicMock())
    return plugin
