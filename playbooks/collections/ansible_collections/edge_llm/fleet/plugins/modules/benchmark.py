#!/usr/bin/python
"""Documentation of the edge_llm.fleet.benchmark action (plugins/action/benchmark.py); it runs no code itself.

The action runs on the controller and calls the verify board module once (its api option streams the
API requests in the same call); this file gives
ansible-doc and argument checks their description, like ansible.builtin's action-only modules.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: benchmark
short_description: Repeated smoke inference and a streaming API benchmark per model, in one task
description:
  - Runs each model O(runs) times on the board (edge_llm.fleet.verify with repeat) and takes medians, then, with
    O(api) and in the same board call, streams O(runs) chat completions per model through the edge-llm-serve
    instances fleet launch started (the bench of edge_llm.fleet.api; the module reads the board's token file).
  - Every option the task does not pass is read from the host's variables by name (edge_llm_benchmark_*,
    edge_llm_serve_bind, edge_llm_serve_port_base, and the edge_llm_* variables of O(expect)).
  - Returns the combined figures as C(edge_llm) (kind benchmark, with C(api)) and, when O(dir) is set, writes them
    to C(<dir>/<inventory_hostname>.json) on the controller.
options:
  expect:
    description: Inventory variables of the board (edge_llm_board, edge_llm_board_facts, edge_llm_models); read
      from the host's variables when not given.
    type: dict
    required: false
  runs:
    description: Runs per model (smoke and API).
    type: int
    default: 5
  prompt:
    description: Prompt of every run.
    type: str
  max_tokens:
    description: Output length of every run.
    type: int
  api:
    description: Also benchmark the streaming OpenAI API of the running service.
    type: bool
    default: true
  bind:
    description: The service's listen address (edge_llm_serve_bind).
    type: str
    default: 127.0.0.1
  port_base:
    description: Port of the board's first model (edge_llm_serve_port_base).
    type: int
    default: 8080
  address:
    description: Address clients use to reach the board (endpoint URLs of a LAN bind).
    type: str
  timeout:
    description: Seconds per streamed request.
    type: int
    default: 120
  dir:
    description: Controller directory for C(<host>.json) results (empty = report only).
    type: str
    default: ""
author: edge-llm provisioner
"""

EXAMPLES = r"""
- name: Benchmark the board
  edge_llm.fleet.benchmark:
    expect:
      edge_llm_board: "{{ edge_llm_board }}"
      edge_llm_models: "{{ edge_llm_models }}"
    runs: 5
    dir: /tmp/bench
"""

RETURN = r"""
edge_llm:
  description: kind benchmark - the verify verdict, per-model medians (benchmark) and API figures (api).
  returned: always
  type: dict
"""
