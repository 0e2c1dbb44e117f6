"""Controller side of edge_llm.fleet.serve (fleet launch): plan the board's service, run the board module once.

The plan (program, unit, per-model configs and drop-ins, ports, token path, owners and modes) comes
from provisioner.fleet.launch, the one place those rules live; the board's bearer token comes from
ansible.builtin.password on the controller (a 0600 file in a 0700 directory, created at the first
launch and read back by every rerun, where `fleet benchmark` and clients find it). This plugin only
moves data: the token reaches the board module as a no_log option, never a result.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import (
    BoardAction,
    inventory,
    launch,
    serve_config,
)

#: the token's alphabet and length (43 letters/digits: ~256 bits), as ansible.builtin.password generates it
TOKEN_CHARS = ["ascii_letters", "digits"]
TOKEN_LENGTH = 43
#: result keys passed on from the board module (nothing else: no invocation, no file contents)
KEEP = ("changed", "failed", "msg", "edge_llm", "skipped", "unreachable", "warnings")


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("expect", "bind", "port_base", "token_path", "token_dir", "enabled", "health_retries",
                             "health_delay", "health_timeout", "address"))
    VARIABLES = {"bind": "edge_llm_serve_bind", "port_base": "edge_llm_serve_port_base",
                 "token_dir": "edge_llm_serve_token_dir", "enabled": "edge_llm_serve_enabled",
                 "health_retries": "edge_llm_serve_health_retries", "health_delay": "edge_llm_serve_health_delay",
                 "health_timeout": "edge_llm_serve_health_timeout"}

    def _token(self, path: str, task_vars: dict) -> str | None:
        """The board's token from its controller file (generated there on first use); None in a check-mode
        run before the first launch, which must not create it."""
        if self._play_context.check_mode and not os.path.exists(path):
            return None
        why = serve_config.token_file_problem(path)         # form and modes, before anything is pushed
        if why:
            raise AnsibleActionFail(why)
        lookup = self._shared_loader_obj.lookup_loader.get("ansible.builtin.password", loader=self._loader,
                                                           templar=self._templar)
        token = str(lookup.run([path], variables=task_vars, chars=TOKEN_CHARS, length=TOKEN_LENGTH)[0])
        why = serve_config.token_file_problem(path)
        if why:
            raise AnsibleActionFail(why)
        return token

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        if not args.get("token_path") and args.get("token_dir"):
            args["token_path"] = os.path.join(str(args["token_dir"]), str(task_vars.get("inventory_hostname")))
        if not args.get("token_path"):
            raise AnsibleActionFail("edge_llm.fleet.serve: token_path (or token_dir) is required: the controller's "
                                    "token file of this board")
        try:
            expect = inventory.HostVars.from_vars(self._expect_vars(args, task_vars))
            plan = launch.units(expect, bind=str(args.get("bind") or "127.0.0.1"),
                                 port_base=int(args.get("port_base") or 8080))
        except Exception as exc:  # ValueError/TypeError of the vars, UserError of the catalog (unknown board id)
            raise AnsibleActionFail(f"edge_llm_serve: {exc}") from exc
        spec = launch.launch_spec(plan, user=expect.serve_user)
        module_args = {
            **spec,
            "token": self._token(str(args["token_path"]), task_vars),
            "enabled": boolean(args.get("enabled", True), strict=False),
            "health_retries": int(args.get("health_retries", 30)),
            "health_delay": float(args.get("health_delay", 1)),
            "health_timeout": float(args.get("health_timeout", 5)),
            "address": args.get("address") or self._address(task_vars),
        }
        raw = self._execute_module(module_name="edge_llm.fleet.serve", module_args=module_args, task_vars=task_vars)
        if raw.get("unreachable"):
            return raw
        result.update({k: raw[k] for k in KEEP if k in raw})
        if raw.get("failed") and "msg" not in raw:
            result["msg"] = str(raw.get("module_stderr") or raw.get("module_stdout") or raw)[-2000:]
        return result
