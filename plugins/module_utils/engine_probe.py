# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Ask a running vLLM OpenAI server what it serves: /health, /v1/models, /metrics.

Only vLLM's /v1 routes check the API key (vllm/entrypoints/openai/api_server.py, the AuthenticationMiddleware
guards paths under /v1), so /health and /metrics are read without it. The engine is asked on the host
itself (loopback): no proxy applies.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket

from ansible.module_utils.six.moves.http_client import HTTPException
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.request import ProxyHandler, Request, build_opener

from ansible_collections.hy3.fleet.plugins.module_utils import vllm_metrics

_OPENER = build_opener(ProxyHandler({}))


NO_ANSWER, TIMED_OUT = "no_answer", "timed_out"


def ask(url, timeout, headers=None):
    """(status code, body text, why): code None when nothing answered, why then TIMED_OUT (no answer in time:
    on the host's own loopback, an engine too busy serving to answer, or hung) or NO_ANSWER (refused,
    unreachable, a broken answer)."""
    try:
        response = _OPENER.open(Request(url, headers=headers or {}), timeout=timeout)
        return response.getcode(), response.read().decode("utf-8", "replace"), None
    except HTTPError as exc:
        return exc.code, "", None
    except (URLError, OSError, ValueError, HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return None, "", TIMED_OUT if isinstance(reason, socket.timeout) else NO_ANSWER


def get(url, timeout, headers=None):
    """(status code, body text); status None when nothing answered (refused, timeout)."""
    code, body, _why = ask(url, timeout, headers)
    return code, body


def served_models(body):
    """[{id, max_model_len}] from a /v1/models answer (vLLM's ModelCard carries max_model_len)."""
    try:
        data = json.loads(body).get("data") or []
    except (ValueError, AttributeError):
        return []
    return [{"id": item.get("id"), "max_model_len": item.get("max_model_len")} for item in data if isinstance(item, dict)]


def serving_state(base_url, api_key="", timeout=5):
    """healthy, models, max_model_len, running, waiting, kv_cache_usage and a status."""
    base = base_url.rstrip("/")
    health, _body = get(base + "/health", timeout)
    state = dict(vllm_metrics.load(""), healthy=health == 200, models=[], max_model_len=None)
    if not state["healthy"]:
        return dict(state, status="not_serving")
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    code, body = get(base + "/v1/models", timeout, headers)
    if code == 200:
        state["models"] = served_models(body)
        state["max_model_len"] = state["models"][0]["max_model_len"] if state["models"] else None
    code, body = get(base + "/metrics", timeout)
    if code == 200:
        state.update(vllm_metrics.load(body))
    return dict(state, status="serving")
