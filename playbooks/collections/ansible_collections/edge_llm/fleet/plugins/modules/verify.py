#!/usr/bin/python
"""Board-side gatherer for edge-llm verify: reads, stats and runs what a spec names, in one call.

The controller (action plugin of the same name, provisioner.fleet.probe) builds the spec from the
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
    description: What to gather (built by provisioner.fleet.probe.probe_spec).
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
author: edge-llm provisioner
"""

EXAMPLES = r"""
- name: Verify the board
  edge_llm.fleet.verify:
    expect: "{{ edge_llm_expect }}"
"""

RETURN = r"""
probe:
  description: Raw state (read, stat, exists, units, models, runs).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils.probe import gather  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={"spec": {"type": "dict", "required": False},
                       "expect": {"type": "dict", "required": False},
                       "only_model": {"type": "str", "required": False},
                       "smoke_only": {"type": "bool", "required": False, "default": False},
                       "model_dir": {"type": "dict", "required": False}},
        supports_check_mode=True,
    )
    spec = module.params.get("spec")
    if not spec:
        module.fail_json(msg="edge_llm.fleet.verify needs a spec; call it through the action plugin "
                             "(plugins/action/verify.py) with expect=")
    module.exit_json(changed=False, probe=gather(spec, module.check_mode))


if __name__ == "__main__":
    main()
