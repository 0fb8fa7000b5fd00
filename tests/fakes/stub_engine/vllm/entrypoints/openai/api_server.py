# -*- coding: utf-8 -*-
"""Test and benchmark stand-in for `python -m vllm.entrypoints.openai.api_server --config FILE`.

It answers /health, /v1/models (with the config's max-model-len), /metrics (vLLM's request gauges) and
/v1/chat/completions at once, so the benchmark measures Ansible's own per-host overhead, not the
engine. A streaming request sends one chunk per second for max_tokens chunks and counts as running
meanwhile: the drain tests keep an engine busy with it. Put tests/fakes/stub_engine first on
PYTHONPATH to use it.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="%(model)s"} %(running)d.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="%(model)s"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="%(model)s"} %(usage).2f
"""


class Handler(BaseHTTPRequestHandler):
    config = {}
    running = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        model = self.config.get("served-model-name", "hy3")
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/metrics":
            self._send(200, METRICS % {"model": model, "running": self.running, "usage": 0.1 * self.running},
                       "text/plain; version=0.0.4")
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": model, "object": "model",
                                                         "max_model_len": self.config.get("max-model-len")}]})
        else:
            self._send(404, {})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if request.get("stream"):
            self._stream(int(request.get("max_tokens", 1)))
            return
        self._send(200, {"object": "chat.completion", "model": self.config.get("served-model-name", "hy3"),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "你好！"},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})

    def _stream(self, chunks):
        with self.lock:
            Handler.running += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for _chunk in range(chunks):
                self.wfile.write(b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n')
                self.wfile.flush()
                time.sleep(1)
            self.wfile.write(b"data: [DONE]\n\n")
        finally:
            with self.lock:
                Handler.running -= 1


def main():
    with open(sys.argv[sys.argv.index("--config") + 1]) as handle:
        Handler.config = yaml.safe_load(handle)
    server = ThreadingHTTPServer((Handler.config.get("host", "127.0.0.1"), int(Handler.config["port"])), Handler)
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
