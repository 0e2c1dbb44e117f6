#!/usr/bin/python
"""Board-side client of edge-llm-serve's OpenAI API: endpoint/auth probe (launch) and streaming benchmark.

Runs ON the board, so a loopback-only service (the default bind) is measured where it listens, and
the bearer token is read from the board's token file by this module: it never travels in module
arguments, results or logs. Stdlib only (a QLI image has no pip).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: api
short_description: Probe or benchmark edge-llm-serve through its OpenAI-compatible API
description:
  - O(mode=probe) checks that each instance answers GET /v1/models with the board's bearer token and refuses
    it without one, and reports each instance's endpoint URL.
  - O(mode=bench) streams POST /v1/chat/completions O(runs) times per instance and reports the time to the first
    streamed token and the decode rate (tokens after the first / time after the first), with medians.
options:
  instances:
    description: List of {model, port, bind} (edge_llm.fleet.serve_units instances).
    type: list
    elements: dict
    required: true
  token_file:
    description: The board's bearer token file (read here, never returned).
    type: str
    required: true
  address:
    description: Address clients use to reach the board (endpoint URL of a LAN bind).
    type: str
    required: false
  mode:
    description: probe or bench.
    type: str
    default: probe
  runs:
    type: int
    default: 3
    description: Streaming requests per instance (bench).
  prompt:
    type: str
    default: Explain in two sentences what an NPU is.
    description: User message of each benchmark request.
  max_tokens:
    type: int
    default: 64
    description: max_tokens of each benchmark request.
  timeout:
    type: int
    default: 120
    description: Seconds per request.
author: edge-llm provisioner
"""

EXAMPLES = r"""
- name: Benchmark the API
  edge_llm.fleet.api:
    instances: "{{ edge_llm_serve_plan.instances }}"
    token_file: /etc/edge-llm/serve/api-token
    mode: bench
"""

RETURN = r"""
edge_llm:
  description: kind launch (endpoints, auth) or api_benchmark (per model figures).
  returned: always
  type: dict
"""

import http.client  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def local_host(bind):
    """Where a client on the board reaches a service bound to ``bind``."""
    return "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind


def endpoint(inst, address):
    """The base URL a client uses: the board's own loopback for a loopback bind, else the board's address."""
    bind = str(inst.get("bind") or "127.0.0.1")
    host = bind if bind in LOOPBACK else (address if bind in ("0.0.0.0", "::") and address else bind)
    return f"http://{host}:{int(inst['port'])}/v1"


def request(inst, method, path, token, body=None, timeout=30):
    """(status, raw body) of one request to the instance on the board."""
    conn = http.client.HTTPConnection(local_host(str(inst.get("bind") or "127.0.0.1")), int(inst["port"]),
                                      timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def stream_once(inst, token, prompt, max_tokens, timeout):
    """One streamed chat completion: seconds to the first content chunk, tokens, decode tok/s."""
    conn = http.client.HTTPConnection(local_host(str(inst.get("bind") or "127.0.0.1")), int(inst["port"]),
                                      timeout=timeout)
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": True}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"} if token else \
        {"Content-Type": "application/json"}
    t0 = time.monotonic()
    first = last = None
    chunks = 0
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            delta = (json.loads(data).get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content"):
                now = time.monotonic()
                first = first if first is not None else now
                last = now
                chunks += 1
    finally:
        conn.close()
    if first is None:
        raise RuntimeError("the stream ended without a token")
    decode = round((chunks - 1) / (last - first), 2) if chunks > 1 and last > first else None
    return {"ttft_s": round(first - t0, 4), "tokens": chunks, "decode_tok_s": decode}


def read_token(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def probe(module, instances, token):
    """Endpoints and auth of each instance: the board's token accepted, a request without it refused (401)."""
    if not token:
        # fleet launch always installs the token; without it nothing here could tell an open service from a
        # protected one, so the probe fails instead of passing an unauthenticated API.
        return {"kind": "launch", "endpoints": {}, "auth": "unknown"}, [
            f"cannot read the board's API token {module.params['token_file']} (fleet launch installs it)"]
    endpoints, problems = {}, []
    for inst in instances:
        model = str(inst["model"])
        endpoints[model] = endpoint(inst, module.params["address"])
        try:
            ok, _ = request(inst, "GET", "/v1/models", token)
            anon, _ = request(inst, "GET", "/v1/models", None)
        except OSError as exc:
            problems.append(f"{model}: {exc}")
            continue
        if ok != 200:
            problems.append(f"{model}: GET /v1/models with the board's token answered {ok}")
        if anon != 401:
            problems.append(f"{model}: GET /v1/models without a token answered {anon}, not 401")
    return {"kind": "launch", "endpoints": endpoints, "auth": "bearer"}, problems


def bench(module, instances, token):
    p = module.params
    out = {}
    for inst in instances:
        runs, errors = [], []
        for _ in range(max(1, int(p["runs"]))):
            try:
                runs.append(stream_once(inst, token, p["prompt"], int(p["max_tokens"]), int(p["timeout"])))
            except (OSError, ValueError, RuntimeError) as exc:
                errors.append(str(exc)[:200])
        ttfts = [r["ttft_s"] for r in runs]
        decs = [r["decode_tok_s"] for r in runs if r["decode_tok_s"] is not None]
        out[str(inst["model"])] = {
            "endpoint": endpoint(inst, p["address"]), "n": len(runs), "failed": len(errors), "errors": errors[:3],
            "runs": runs, "median_ttft_s": round(statistics.median(ttfts), 4) if ttfts else None,
            "median_decode_tok_s": round(statistics.median(decs), 2) if decs else None}
    problems = [f"{m}: {b['failed']} of {b['n'] + b['failed']} streamed requests failed ({b['errors'][0]})"
                for m, b in out.items() if b["failed"]]
    return {"kind": "api_benchmark", "api": out}, problems


def main():
    module = AnsibleModule(argument_spec={
        "instances": {"type": "list", "elements": "dict", "required": True},
        "token_file": {"type": "str", "required": True, "no_log": False},
        "address": {"type": "str", "required": False, "default": None},
        "mode": {"type": "str", "default": "probe", "choices": ["probe", "bench"]},
        "runs": {"type": "int", "default": 3},
        "prompt": {"type": "str", "default": "Explain in two sentences what an NPU is."},
        "max_tokens": {"type": "int", "default": 64},
        "timeout": {"type": "int", "default": 120},
    }, supports_check_mode=True)
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no requests sent")
    token = read_token(module.params["token_file"])
    instances = module.params["instances"]
    payload, problems = (bench if module.params["mode"] == "bench" else probe)(module, instances, token)
    if problems:
        module.fail_json(msg="; ".join(problems), edge_llm=payload)
    module.exit_json(changed=False, edge_llm=payload)


if __name__ == "__main__":
    main()
