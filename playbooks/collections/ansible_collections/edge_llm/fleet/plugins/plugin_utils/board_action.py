"""The controller side every edge_llm.fleet action plugin shares.

Each action builds its board module's arguments from the rules in the provisioner package (declared in the
collection's requirements.txt: the built collection runs on any controller that has it, no checkout), calls
the module on the board, and judges the answer with those same rules. What they all do alike lives here:
one clear error when the package is missing, one way to call a board module, and one way to read the verify
module's probe out of its result, and one way to read the action's inputs from the host's variables.

Why the inputs come from variables and not from ``x: "{{ edge_llm_x }}"`` task arguments: ansible-core
(2.19) compiles a Jinja template for every templated argument in the forked worker of every board and
every task, with no cache across workers. A role task passing a dozen such arguments cost the controller
more CPU than the board call itself (profiled with cProfile on process time, 64 virtual boards). A
variable read by name costs nothing unless its own value is a template.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:
    from provisioner.contracts import inventory
    from provisioner.fleet import benchmark, deploy, launch, rollback, update_os, verify
    from provisioner.fleet.shared import deploy_index, serve_config, version_switch
except ImportError as exc:
    MISSING = f"{exc}"
    inventory = benchmark = deploy = launch = rollback = update_os = verify = None
    deploy_index = serve_config = version_switch = None
else:
    MISSING = ""

__all__ = ["BoardAction", "benchmark", "deploy", "deploy_index", "inventory", "launch", "rollback", "serve_config",
           "update_os", "verify", "version_switch"]


class BoardAction(ActionBase):
    """An action whose work is one or two board module calls, judged on the controller."""

    TRANSFERS_FILES = False
    #: input -> the host variable (inventory, group_vars, host_vars, -e, the calling role's defaults) that
    #: gives it when the task does not pass it as an argument
    VARIABLES: Mapping[str, str] = {}

    def _var(self, task_vars, name: str, default=None):
        """Host variable ``name``, templated only when its value holds a template (see the module docstring)."""
        if name not in task_vars:
            return default
        return self._templar.template(task_vars[name])

    def _inputs(self, task_vars) -> dict:
        """The task's arguments, completed from :attr:`VARIABLES` (an argument the task passes wins)."""
        args = dict(self._task.args)
        for key, name in self.VARIABLES.items():
            if key not in args and name in task_vars:
                args[key] = self._var(task_vars, name)
        return args

    def _expect_vars(self, args: dict, task_vars) -> dict:
        """The ``edge_llm_*`` variables the inventory contract reads (``expect`` when the task passes it)."""
        if args.get("expect"):
            return dict(args["expect"])
        for name in ("edge_llm_board", "edge_llm_models"):
            if name not in task_vars:
                raise AnsibleActionFail(inventory.not_set(name))
        return {n: self._var(task_vars, n) for n in inventory.HOST_VARS_READ if n in task_vars}

    def _address(self, task_vars) -> str | None:
        """How the controller reaches the board (``ansible_host``, else its inventory name)."""
        return self._var(task_vars, "ansible_host") or task_vars.get("inventory_hostname")

    def run(self, tmp=None, task_vars=None):
        if MISSING:
            raise AnsibleActionFail("edge_llm.fleet needs the Python package edge-llm-provisioner in the "
                                    f"controller's Python ({MISSING}): pip install edge-llm-provisioner")
        return super().run(tmp, task_vars)

    def _module(self, name: str, args: dict, task_vars) -> dict:
        """Run board module ``name`` once (its result as Ansible returns it, unreachable included)."""
        return self._execute_module(module_name=name, module_args=args, task_vars=task_vars)

    def _probe(self, spec: dict, task_vars, result: dict, **more) -> tuple[dict | None, dict | None]:
        """Run edge_llm.fleet.verify with ``spec`` (and ``more`` of its options): (its result, with the probe
        under ``probe``, None), or (None, the result to return) when the board was unreachable or the module
        failed (``result`` then says why)."""
        raw = self._module("edge_llm.fleet.verify", {"spec": spec, **more}, task_vars)
        if raw.get("unreachable"):
            return None, raw
        if raw.get("failed") or "probe" not in raw:
            result.update(failed=True, msg=f"probe failed: {raw.get('msg') or raw.get('module_stderr') or raw}")
            return None, result
        return raw, None
