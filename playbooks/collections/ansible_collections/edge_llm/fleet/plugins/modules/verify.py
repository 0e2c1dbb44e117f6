#!/usr/bin/python
"""Board-side gatherer for edge-llm verify: reads, stats and runs what a spec names, in one call.

The controller (action plugin of the same name, provisioner.fleet.verify) builds the spec from the
on-board layout and the inventory and judges the result; this module knows nothing about boards,
so one module call per board is all verify costs.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verify
short_description: Gather edge-llm board state and run a smoke inference (one round trip)
description:
  - Reads files, stats paths, asks systemctl, reads model metadata (size, sha256 with a cache keyed by
    inode, size and mtime) and runs the smoke inference argv lists named in O(spec).
  - Normally called through the action plugin of the same name, which builds O(spec) on the controller from
    the inventory (edge_llm_* variables) and evaluates the result.
options:
  spec:
    description: What to gather (built by provisioner.fleet.verify.probe_spec).
    type: dict
    required: false
  expect:
    description: Inventory expectations; consumed by the action plugin, ignored here.
    type: dict
    required: false
  only_model:
    description: Consumed by the action plugin.
    type: str
    required: false
  smoke_only:
    description: Consumed by the action plugin.
    type: bool
    required: false
    default: false
  model_dir:
    description: Consumed by the action plugin.
    type: dict
    required: false
  api:
    description:
      - After the probe, stream chat completions through the running edge-llm-serve instances in the same call
        (keys instances, token_file, address, runs, prompt, max_tokens, timeout; as edge_llm.fleet.api in bench
        mode, which reads the token from the board's file). The figures are returned as C(api).
      - Skipped in check mode. Used by edge_llm.fleet.benchmark, so a benchmark is one board call.
    type: dict
    required: false
author: edge-llm provisioner
"""

EXAMPLES = r"""
# the action reads the board's edge_llm_* variables (group_vars, host_vars, -e) by name
- name: Verify the board
  edge_llm.fleet.verify: {}

- name: Verify one model, smoke run only
  edge_llm.fleet.verify:
    only_model: gemma-4-e2b
    smoke_only: true
"""

RETURN = r"""
probe:
  description: Raw state (read, stat, exists, units, models, runs).
  returned: always
  type: dict
api:
  description: The streaming API figures per model and their problems (C(edge_llm.fleet.api) bench payload).
  returned: when O(api) is set, outside check mode
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils import serve_client  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils.probe import gather  # noqa: E402


def api_bench(api):
    """The API half of a benchmark, after the probe in the same call (see O(api))."""
    payload, problems = serve_client.bench_options(api, serve_client.read_token(api["token_file"]))
    return {**payload, "problems": problems}


def main():
    module = AnsibleModule(
        argument_spec={"spec": {"type": "dict", "required": False},
                       "expect": {"type": "dict", "required": False},
                       "only_model": {"type": "str", "required": False},
                       "smoke_only": {"type": "bool", "required": False, "default": False},
                       "model_dir": {"type": "dict", "required": False},
                       "api": {"type": "dict", "required": False, "options": {
                           "instances": {"type": "list", "elements": "dict", "required": True},
                           "token_file": {"type": "str", "required": True, "no_log": False},
                           "address": {"type": "str", "required": False, "default": None},
                           **serve_client.BENCH_OPTIONS}}},
        supports_check_mode=True,
    )
    spec = module.params.get("spec")
    if not spec:
        module.fail_json(msg="edge_llm.fleet.verify needs a spec; call it through the action plugin "
                             "(plugins/action/verify.py) with expect=")
    result = {"probe": gather(spec, module.check_mode)}
    if module.params.get("api") and not module.check_mode:
        result["api"] = api_bench(module.params["api"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
