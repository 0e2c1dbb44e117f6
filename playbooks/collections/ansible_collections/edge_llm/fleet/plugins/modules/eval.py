#!/usr/bin/python
"""Board-side runner of an eval suite: sends the suite's chat requests to edge-llm-serve, returns the answers.

Runs ON the board, like edge_llm.fleet.api: a loopback-only service is asked where it listens, and the
bearer token is read from the board's token file here, after the instance's own process is proven to hold
the port (module_utils/serve_client.listener_problem). It judges nothing: the controller scores the
answers (provisioner.eval.score), so a board's text is only ever compared there. Stdlib only.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: eval
short_description: Send an eval suite's chat completions to edge-llm-serve and return the answers
description:
  - For each instance, waits for GET /health (bounded), then sends each request of O(requests) to
    POST /v1/chat/completions (not streamed) and returns, per model and request id, the HTTP status, the
    answer's text, its tool calls and finish reason, or the error. Answers are cut at O(keep) characters.
  - Normally called through the action plugin of the same name, which builds O(requests) from an eval suite
    on the controller and scores the answers there.
options:
  instances:
    description: List of {model, unit, port, bind} (edge_llm.fleet.serve_units instances).
    type: list
    elements: dict
    required: true
  token_file:
    description: The board's bearer token file (read here, never returned).
    type: str
    required: true
  requests:
    description: List of {id, body}; body is an OpenAI chat completion request without C(model) and C(stream).
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds per request.
    type: int
    default: 120
  keep:
    description: Characters of each answer's text and of each call's arguments returned.
    type: int
    default: 2000
  health_retries:
    description: GET /health polls per instance before its requests (0 = no wait).
    type: int
    default: 0
  health_delay:
    description: Seconds between /health polls.
    type: float
    default: 2
  health_timeout:
    description: Seconds per /health poll.
    type: float
    default: 5
author: edge-llm provisioner
"""

EXAMPLES = r"""
- name: Eval through the serving API (the action builds the requests from a suite)
  edge_llm.fleet.eval: {}
"""

RETURN = r"""
answers:
  description: model -> request id -> {status, content, tool_calls, finish_reason, error, seconds}.
  returned: always
  type: dict
problems:
  description: Instances that could not be asked at all (not listening, never healthy).
  returned: always
  type: list
"""

import http.client  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils import serve_client  # noqa: E402


def _cut(value, keep):
    return value[:keep] if isinstance(value, str) else value


def ask(inst, token, body, timeout, keep):
    """One chat completion: what came back of it, bounded."""
    t0 = time.monotonic()
    try:
        status, raw = serve_client.request(inst, "POST", "/v1/chat/completions", token, body=body, timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        return {"status": 0, "error": f"{type(exc).__name__}: {exc}"[:keep], "seconds": round(time.monotonic() - t0, 3)}
    out = {"status": status, "seconds": round(time.monotonic() - t0, 3)}
    try:
        doc = json.loads(raw or b"{}")
    except ValueError:
        doc = None
    if status != 200 or not isinstance(doc, dict):
        err = (doc or {}).get("error") if isinstance(doc, dict) else None
        msg = err.get("message") if isinstance(err, dict) else raw[:300].decode("utf-8", "replace")
        out["error"] = f"HTTP {status}: {msg}"[:keep]
        # the service's 500 for an answer that did not fit (a tool_choice unmet, JSON that is not JSON)
        # carries the model's own words in error.model_output: the eval report shows them
        said = err.get("model_output") if isinstance(err, dict) else None
        if isinstance(said, str) and said:
            out["content"] = _cut(said, keep)
        return out
    # the answer's shape per the official openai package's types (3.57.0): choices[0].message has content (str or
    # null) and tool_calls, each {id, type "function", function {name, arguments: JSON text}}
    # (openai/types/chat/chat_completion_message.py, chat_completion_message_function_tool_call.py)
    choice = (doc.get("choices") or [{}])[0] or {}
    msg = choice.get("message") or {}
    calls = []
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            calls.append({"type": "function", "function": {"name": _cut(fn.get("name"), 200),
                                                            "arguments": _cut(fn.get("arguments"), keep)}})
    out.update(content=_cut(msg.get("content"), keep), tool_calls=calls[:16],
               finish_reason=_cut(choice.get("finish_reason"), 40))
    return out


def main():
    module = AnsibleModule(argument_spec={
        "instances": {"type": "list", "elements": "dict", "required": True},
        "token_file": {"type": "str", "required": True, "no_log": False},
        "requests": {"type": "list", "elements": "dict", "required": True},
        "timeout": {"type": "int", "default": 120},
        "keep": {"type": "int", "default": 2000},
        "health_retries": {"type": "int", "default": 0},
        "health_delay": {"type": "float", "default": 2},
        "health_timeout": {"type": "float", "default": 5},
    }, supports_check_mode=True)
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no requests sent", answers={}, problems=[])
    token = serve_client.read_token(p["token_file"])
    answers, problems = {}, []
    for inst in p["instances"]:
        model = str(inst["model"])
        why = serve_client.listener_problem(inst)
        if why is None and p["health_retries"]:
            late = serve_client.wait_healthy(inst, p["health_retries"], p["health_delay"], p["health_timeout"])
            why = f"GET /health never answered 200 ({late})" if late else None
        if why is None and not token:
            why = f"cannot read the board's API token {p['token_file']} (fleet launch installs it)"
        if why:
            problems.append(f"{model}: {why}")
            continue
        answers[model] = {str(r["id"]): ask(inst, token, {**r["body"], "model": model, "stream": False},
                                            p["timeout"], p["keep"]) for r in p["requests"]}
    module.exit_json(changed=False, answers=answers, problems=problems)


if __name__ == "__main__":
    main()
