# -*- coding: utf-8 -*-
"""Test and benchmark stand-in for `python -m vllm.entrypoints.openai.api_server --config FILE`.

It answers /health and /v1/chat/completions at once, so the benchmark measures Ansible's own
per-host overhead, not the engine. Put tests/fakes/stub_engine first on PYTHONPATH to use it.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml


class Handler(BaseHTTPRequestHandler):
    model = "hy3"

    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 404, {})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(200, {"object": "chat.completion", "model": self.model,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "你好！"},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})


def main():
    with open(sys.argv[sys.argv.index("--config") + 1]) as handle:
        config = yaml.safe_load(handle)
    Handler.model = config.get("served-model-name", "hy3")
    server = ThreadingHTTPServer((config.get("host", "127.0.0.1"), int(config["port"])), Handler)
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
