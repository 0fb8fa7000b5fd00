# -*- coding: utf-8 -*-
"""When does an engine count as gone: a systemd-run one for the wait (Restart=always hides crashes), a pid-mode one
whose process has exited but is not yet reaped."""
import os
import re
import subprocess
import time

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils.engine_state import (
    live_pid, parse_show, process_state, service_gone)

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
    from ansible_collections.hy3.fleet.plugins.module_utils.engine_state import UNIT_PROPERTIES
    text = "ActiveState=inactive\nMainPID=0\nLoadState=not-found\nUnitFileState=\nDescription=x\n"
    assert parse_show(text, UNIT_PROPERTIES)["LoadState"] == "not-found"
    assert "LoadState" not in parse_show(text) and "Description" not in parse_show(text, UNIT_PROPERTIES)
    assert live_pid("/nonexistent/engine.pid") == 0


# --- a zombie is not an engine: an init that reaps every few seconds leaves kill(pid, 0) succeeding ---

ENGINE_SH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "serve", "templates", "engine.sh.j2")


@pytest.fixture()
def zombie():
    """A child that has exited and that nobody has reaped yet (this process is its parent)."""
    child = subprocess.Popen(["sh", "-c", "exit 3"])
    deadline = time.monotonic() + 5
    while process_state(child.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    yield child.pid
    child.wait()


def test_a_zombie_pid_is_not_a_live_engine(tmp_path, zombie):
    pid_file = tmp_path / "engine.pid"
    pid_file.write_text("%d\n" % zombie)
    assert live_pid(str(pid_file)) == 0
    pid_file.write_text("%d\n" % os.getpid())
    assert live_pid(str(pid_file)) > 0


def test_the_state_letter_follows_the_last_parenthesis(tmp_path):
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_text("77 (vllm (worker) 1) Z 1 77 77 0 -1\n")
    assert process_state(77, str(tmp_path)) == "Z"
    assert process_state(78, str(tmp_path)) is None


def script_alive(pid):
    """engine.sh's alive() as the template writes it (plain shell, no Jinja), run by /bin/sh on pid."""
    with open(ENGINE_SH) as handle:
        alive = re.search(r"^alive\(\) \{\n.*?^\}\n", handle.read(), re.M | re.S).group(0)
    return subprocess.run(["sh", "-c", alive + 'alive "$1"', "sh", str(pid)], check=False).returncode == 0


def test_the_control_script_counts_a_zombie_as_stopped(zombie):
    assert not script_alive(zombie)
    assert script_alive(os.getpid())
    assert not script_alive(2 ** 22 + 1)             # above pid_max: no such process
