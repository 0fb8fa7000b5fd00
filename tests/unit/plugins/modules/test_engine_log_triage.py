# -*- coding: utf-8 -*-
import os
import threading
import time

from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.modules import engine_log_triage

OOM = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."


def test_fails_with_class_line_and_next_step(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("INFO starting\n%s\n" % OOM)
    out = run_module(engine_log_triage.main, {"log_path": str(log)})
    assert out.failed and out.result["failure_class"] == "memory_allocation"
    assert OOM in out.result["msg"] and "lower tier, then max_model_len" in out.result["msg"]


def test_waits_until_the_log_says_ready(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("INFO loading\n")

    def later():
        time.sleep(0.5)
        with open(str(log), "a") as handle:
            handle.write("INFO:     Application startup complete.\n")
    threading.Thread(target=later).start()
    out = run_module(engine_log_triage.main, {"log_path": str(log), "timeout": 20, "interval": 0.1})
    assert not out.failed and out.result["ready"] and out.result["waited"] < 10


def test_dead_process_ends_the_wait_unclassified(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("INFO something odd\nKilled\n")
    pid_file = tmp_path / "engine.pid"
    pid_file.write_text("999999999")
    out = run_module(engine_log_triage.main, {"log_path": str(log), "pid_file": str(pid_file), "timeout": 30})
    assert out.failed and out.result["process_alive"] is False and out.result["waited"] < 10
    assert "unclassified" in out.result["msg"] and "Killed" in out.result["msg"]


def test_timeout_is_bounded(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("INFO loading\n")
    pid_file = tmp_path / "engine.pid"
    pid_file.write_text(str(os.getpid()))
    out = run_module(engine_log_triage.main, {"log_path": str(log), "pid_file": str(pid_file),
                                              "timeout": 1, "interval": 0.2})
    assert out.failed and "not ready after 1s" in out.result["msg"] and out.result["process_alive"]


def test_report_only(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(OOM)
    out = run_module(engine_log_triage.main, {"log_path": str(log), "fail_on_failure": False}, check_mode=True)
    assert not out.failed and out.result["failure_class"] == "memory_allocation"


def fake_systemctl(tmp_path, monkeypatch, states):
    """A systemctl on PATH answering `show` with the next of states (the last one repeats)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for i, text in enumerate(states):
        (tmp_path / ("state%d" % i)).write_text(text)
    script = bin_dir / "systemctl"
    script.write_text("#!/bin/sh\nn=$(cat %(d)s/count 2>/dev/null || echo 0)\n"
                      "f=%(d)s/state$n; [ -f \"$f\" ] || f=%(d)s/state%(last)d\ncat \"$f\"\n"
                      "echo $((n + 1)) > %(d)s/count\n" % {"d": tmp_path, "last": len(states) - 1})
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))


RUNNING = "ActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\nResult=success\n"
CRASHED = "ActiveState=activating\nSubState=auto-restart\nMainPID=0\nNRestarts=0\nResult=exit-code\n"


def test_a_crashing_unit_ends_the_wait_within_seconds(tmp_path, monkeypatch):
    """Restart=always: the unit never reads "failed", it waits to restart; the wait must see that."""
    fake_systemctl(tmp_path, monkeypatch, [RUNNING, RUNNING, CRASHED])
    log = tmp_path / "engine.log"
    log.write_text("INFO loading\nTypeError: bad option\n")
    out = run_module(engine_log_triage.main, {"log_path": str(log), "service": "hy3-engine",
                                              "timeout": 60, "interval": 0.1})
    assert out.failed and out.result["process_alive"] is False and out.result["waited"] < 10
    assert "about to restart it (result exit-code)" in out.result["msg"] and "bad option" in out.result["msg"]
    assert out.result["service_state"]["SubState"] == "auto-restart"


def test_a_running_unit_is_waited_for(tmp_path, monkeypatch):
    fake_systemctl(tmp_path, monkeypatch, [RUNNING])
    log = tmp_path / "engine.log"
    log.write_text("INFO loading\n")
    out = run_module(engine_log_triage.main, {"log_path": str(log), "service": "hy3-engine",
                                              "timeout": 1, "interval": 0.2})
    assert out.failed and "not ready after 1s" in out.result["msg"] and out.result["process_alive"] is True


def test_pid_file_and_service_exclude_each_other(tmp_path):
    out = run_module(engine_log_triage.main, {"log_path": str(tmp_path / "x"), "service": "a", "pid_file": "/b"})
    assert out.failed and "mutually exclusive" in out.result["msg"]


def test_an_engine_core_that_died_ends_the_wait_while_the_api_server_lives(tmp_path):
    """Seen on a real host: the API server outlived its engine core, so the process alone never ends the wait."""
    log = tmp_path / "engine.log"
    log.write_text("(EngineCore pid=9) ERROR [core.py:1] EngineCore failed to start.\n")
    pid_file = tmp_path / "engine.pid"
    pid_file.write_text(str(os.getpid()))              # a live process
    out = run_module(engine_log_triage.main, {"log_path": str(log), "pid_file": str(pid_file), "timeout": 60})
    assert out.failed and out.result["waited"] < 10 and out.result["process_alive"] is True
    assert "the engine says it failed" in out.result["msg"] and "EngineCore failed to start" in out.result["msg"]
