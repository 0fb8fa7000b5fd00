# -*- coding: utf-8 -*-
"""engine_idle_wait and engine_status against a stand-in engine on loopback (a thread in this process)."""
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.modules import engine_idle_wait, engine_status


class Engine(BaseHTTPRequestHandler):
    running = 0
    metrics = True
    polls = 0
    slow_polls = 0      # polls answered only after SLOW seconds (a host busy serving)
    slow_metrics = 0    # /metrics scrapes answered late while /health answers at once

    def log_message(self, *args):
        pass

    def do_GET(self):
        if Engine.slow_polls and self.path in ("/metrics", "/health"):
            Engine.slow_polls -= 1 if self.path == "/metrics" else 0
            time.sleep(SLOW)
        elif Engine.slow_metrics and self.path == "/metrics":
            Engine.slow_metrics -= 1
            time.sleep(SLOW)
        if self.path == "/metrics" and Engine.metrics:
            Engine.polls += 1
            if Engine.polls > 2:            # the requests in flight end after two polls
                Engine.running = 0
            body = 'vllm:num_requests_running{engine="0"} %d\nvllm:num_requests_waiting{engine="0"} 0\n' % Engine.running
        elif self.path == "/v1/models":
            ok = self.headers.get("Authorization") == "Bearer k"
            body = json.dumps({"data": [{"id": "hy3", "max_model_len": 4096}]}) if ok else None
        elif self.path == "/health":
            body = ""
        else:
            body = None
        data = (body or "").encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


SLOW = 0.5


@pytest.fixture()
def engine(monkeypatch):
    Engine.running, Engine.metrics, Engine.polls, Engine.slow_polls, Engine.slow_metrics = 0, True, 0, 0, 0
    monkeypatch.setattr(engine_idle_wait, "ANSWER_SECONDS", SLOW / 5)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server):
    return "http://127.0.0.1:%d" % server.server_address[1]


def test_waits_until_the_requests_in_flight_end(engine):
    Engine.running = 2
    out = run_module(engine_idle_wait.main, {"url": url(engine), "timeout": 30, "interval": 0.05})
    assert not out.failed and out.result["status"] == "idle" and out.result["busy_polls"] == 2


def test_busy_past_the_timeout_fails_and_says_nothing_changed(engine):
    Engine.running, Engine.polls = 1, -10 ** 6
    out = run_module(engine_idle_wait.main, {"url": url(engine), "timeout": 0, "interval": 0.05})
    assert out.failed and out.result["status"] == "busy" and out.result["running"] == 1
    assert "nothing was changed and the engine was not restarted" in out.result["msg"]


def test_an_engine_too_busy_to_answer_in_time_is_waited_for_not_taken_for_gone(engine):
    Engine.running, Engine.slow_polls = 1, 2
    out = run_module(engine_idle_wait.main, {"url": url(engine), "timeout": 30, "interval": 0.05})
    assert not out.failed and out.result["status"] == "idle" and out.result["busy_polls"] >= 2


def test_metrics_too_slow_while_health_answers_is_still_waited_for(engine):
    # a loaded engine may answer the cheap /health in time but not the /metrics scrape
    Engine.running, Engine.slow_metrics = 1, 2
    out = run_module(engine_idle_wait.main, {"url": url(engine), "timeout": 30, "interval": 0.05})
    assert not out.failed and out.result["status"] == "idle" and out.result["busy_polls"] >= 2


def test_an_engine_that_never_answers_in_time_fails_the_wait_and_changes_nothing(engine):
    Engine.slow_polls = 10 ** 6
    out = run_module(engine_idle_wait.main, {"url": url(engine), "timeout": 0, "interval": 0.05})
    assert out.failed and out.result["status"] == "unanswered"
    assert "did not answer /metrics or /health" in out.result["msg"]
    assert "nothing was changed and the engine was not restarted" in out.result["msg"]


def test_an_engine_without_the_gauges_cannot_be_drained(engine):
    Engine.metrics = False
    out = run_module(engine_idle_wait.main, {"url": url(engine), "timeout": 5})
    assert out.failed and out.result["status"] == "no_metrics"


def test_nothing_serving_has_nothing_to_drain():
    out = run_module(engine_idle_wait.main, {"url": "http://127.0.0.1:9", "timeout": 5})
    assert not out.failed and out.result["status"] == "not_serving"


def test_status_in_pid_mode_reads_process_port_files_record_and_the_engine(engine, tmp_path):
    pid_file = tmp_path / "engine.pid"
    pid_file.write_text("%d\n" % os.getpid())
    config = tmp_path / "vllm.yaml"
    config.write_text("port: 1\n")
    record = tmp_path / "hy3.fact"
    record.write_text(json.dumps({"max_model_len": 4096}))
    out = run_module(engine_status.main, {
        "mode": "pid", "pid_file": str(pid_file), "port": engine.server_address[1],
        "files": [str(config), str(tmp_path / "absent")], "record": str(record),
        "url": url(engine), "api_key": "k"})
    result = out.result
    assert not out.failed and result["status"] == "serving"
    assert result["engine"]["running"] and result["engine"]["pid"] == os.getpid()
    assert result["files"] == {str(config): hashlib.sha1(b"port: 1\n").hexdigest(), str(tmp_path / "absent"): None}
    assert (result["record_status"], result["record"]) == ("ok", {"max_model_len": 4096})
    assert result["serving"]["max_model_len"] == 4096 and result["serving"]["running"] == 0
    # this process holds the port and leads its own process group only by chance: the listener is named either way
    assert [item["pid"] for item in result["port"]["listeners"]] == [os.getpid()]
    assert result["package"] == {"status": "not_asked"}


def test_status_of_an_engine_that_is_gone(tmp_path):
    (tmp_path / "hy3.fact").write_text("{not json")
    out = run_module(engine_status.main, {"mode": "pid", "pid_file": str(tmp_path / "none.pid"), "port": 9,
                                          "record": str(tmp_path / "hy3.fact"), "url": "http://127.0.0.1:9"})
    assert out.result["status"] == "stopped" and out.result["record_status"] == "corrupt"
    assert out.result["serving"]["status"] == "not_serving" and out.result["port"]["strangers"] == []
