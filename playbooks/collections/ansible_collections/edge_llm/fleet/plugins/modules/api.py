#!/usr/bin/python
"""Board-side client of edge-llm-serve's OpenAI API: endpoint/auth probe (launch) and streaming benchmark.

Runs ON the board, so a loopback-only service (the default bind) is measured where it listens, and
the bearer token is read from the board's token file by this module: it never travels in module
arguments, results or logs. The HTTP client is module_utils/serve_client (shared with the serve
module fleet launch runs). Stdlib only (a QLI image has no pip).
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
  health_retries:
    type: int
    default: 0
    description: O(mode=bench) first polls GET /health up to this many times per instance (0 = no wait).
  health_delay:
    type: float
    default: 2
    description: Seconds between /health polls.
  health_timeout:
    type: float
    default: 5
    description: Seconds per /health poll.
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

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils import serve_client  # noqa: E402

read_token = serve_client.read_token


def probe(module, instances, token):
    """Endpoints and auth of each instance: the board's token accepted, a request without it refused (401)."""
    if not token:
        # fleet launch always installs the token; without it nothing here could tell an open service from a
        # protected one, so the probe fails instead of passing an unauthenticated API.
        return {"kind": "launch", "endpoints": {}, "auth": "unknown"}, [
            f"cannot read the board's API token {module.params['token_file']} (fleet launch installs it)"]
    return serve_client.probe(instances, token, module.params["address"])


def bench(module, instances, token):
    """Streamed requests per instance, after waiting for each one's /health when O(health_retries) is set."""
    return serve_client.bench_options({**module.params, "instances": instances}, token)


def main():
    module = AnsibleModule(argument_spec={
        "instances": {"type": "list", "elements": "dict", "required": True},
        "token_file": {"type": "str", "required": True, "no_log": False},
        "address": {"type": "str", "required": False, "default": None},
        "mode": {"type": "str", "default": "probe", "choices": ["probe", "bench"]},
        **serve_client.BENCH_OPTIONS,
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
