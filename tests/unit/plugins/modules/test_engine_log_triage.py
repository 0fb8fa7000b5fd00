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
