"""The controller side every edge_llm.fleet action plugin shares.

Each action builds its board module's arguments from the rules in the provisioner package (declared in the
collection's requirements.txt: the built collection runs on any controller that has it, no checkout), calls
the module on the board, and judges the answer with those same rules. What they all do alike lives here:
one clear error when the package is missing, one way to call a board module, and one way to read the verify
module's probe out of its result.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:
    from provisioner.contracts import inventory
    from provisioner.fleet import deploy_steps, probe, service, update_os, verdict
except ImportError as exc:
    MISSING = f"{exc}"
    inventory = deploy_steps = probe = service = update_os = verdict = None
else:
    MISSING = ""

__all__ = ["BoardAction", "deploy_steps", "inventory", "probe", "service", "update_os", "verdict"]


class BoardAction(ActionBase):
    """An action whose work is one or two board module calls, judged on the controller."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        if MISSING:
            raise AnsibleActionFail("edge_llm.fleet needs the Python package edge-llm-provisioner in the "
                                    f"controller's Python ({MISSING}): pip install edge-llm-provisioner")
        return super().run(tmp, task_vars)

    def _module(self, name: str, args: dict, task_vars) -> dict:
        """Run board module ``name`` once (its result as Ansible returns it, unreachable included)."""
        return self._execute_module(module_name=name, module_args=args, task_vars=task_vars)

    def _probe(self, spec: dict, task_vars, result: dict) -> tuple[dict | None, dict | None]:
        """Run edge_llm.fleet.verify with ``spec``: (its probe, None), or (None, the result to return) when
        the board was unreachable or the module failed (``result`` then says why)."""
        raw = self._module("edge_llm.fleet.verify", {"spec": spec}, task_vars)
        if raw.get("unreachable"):
            return None, raw
        if raw.get("failed") or "probe" not in raw:
            result.update(failed=True, msg=f"probe failed: {raw.get('msg') or raw.get('module_stderr') or raw}")
            return None, result
        return raw["probe"], None
