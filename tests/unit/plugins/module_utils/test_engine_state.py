# -*- coding: utf-8 -*-
"""When does a systemd-run engine count as gone for the wait (Restart=always hides crashes)."""
import pytest

from ansible_collections.hy3.fleet.plugins.module_utils.engine_state import parse_show, service_gone

RUNNING = {"ActiveState": "active", "SubState": "running", "MainPID": 4242, "NRestarts": 0, "Result": "success"}


def state(**changes):
    return dict(RUNNING, **changes)


def test_parse_show_reads_properties_and_numbers():
    text = "ActiveState=activating\nSubState=auto-restart\nMainPID=0\nNRestarts=3\nResult=exit-code\nOther=x\n"
    assert parse_show(text) == {"ActiveState": "activating", "SubState": "auto-restart", "MainPID": 0,
                                "NRestarts": 3, "Result": "exit-code"}


def test_parse_show_of_an_unknown_unit_has_zero_pid():
    assert parse_show("ActiveState=inactive\nSubState=dead\nMainPID=\n")["MainPID"] == 0


@pytest.mark.parametrize("now, words", [
    (state(ActiveState="failed", SubState="failed", MainPID=0, Result="exit-code"), "unit is failed"),
    (state(ActiveState="inactive", SubState="dead", MainPID=0), "unit is inactive"),
    (state(ActiveState="activating", SubState="auto-restart", MainPID=0, Result="exit-code"), "about to restart"),
    (state(NRestarts=1, MainPID=5000), "restarted it (1 restarts)"),
    (state(MainPID=5000), "main process changed (4242 -> 5000)"),
])
def test_gone(now, words):
    assert words in service_gone(RUNNING, now)


@pytest.mark.parametrize("now", [
    RUNNING,
    state(ActiveState="activating", SubState="start-pre", MainPID=0),   # ExecStartPre still runs
    state(ActiveState="activating", SubState="start"),
])
def test_alive_while_starting_or_running(now):
    assert service_gone(RUNNING, now) is None


def test_a_main_pid_seen_only_later_is_not_a_change():
    assert service_gone(state(ActiveState="activating", SubState="start-pre", MainPID=0), RUNNING) is None


def test_parse_show_reads_the_properties_asked_for():
    from ansible_collections.hy3.fleet.plugins.module_utils.engine_state import UNIT_PROPERTIES, live_pid
    text = "ActiveState=inactive\nMainPID=0\nLoadState=not-found\nUnitFileState=\nDescription=x\n"
    assert parse_show(text, UNIT_PROPERTIES)["LoadState"] == "not-found"
    assert "LoadState" not in parse_show(text) and "Description" not in parse_show(text, UNIT_PROPERTIES)
    assert live_pid("/nonexistent/engine.pid") == 0
