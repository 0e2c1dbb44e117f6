"""Controller side of edge_llm.fleet.deploy: one board module call, the gate verdicts, at most one more call.

All rules (the install plan, the gate's expectations and verdict, commit/switch/prune/fallback
steps, the rewrite and restart of a launched instance after a switch) are in provisioner.fleet
(deploy, rollback, shared.deploy_index, shared.version_switch); this plugin only moves data between them and the
board module of the same name.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.edge_llm.fleet.plugins.plugin_utils import eval_action
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import (
    BoardAction,
    deploy,
    deploy_index,
    rollback,
    version_switch,
)

MODULE = "edge_llm.fleet.deploy"


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("mode", "install", "board", "board_facts", "models", "health_gate", "prune", "prompt",
                             "serve_bind", "serve_port_base", "health_retries", "health_delay", "health_timeout"))
    VARIABLES = {"board": "edge_llm_board", "board_facts": "edge_llm_board_facts", "models": "edge_llm_models",
                 "health_gate": "edge_llm_deploy_health_gate", "prune": "edge_llm_deploy_prune",
                 "prompt": "edge_llm_deploy_prompt", "serve_bind": "edge_llm_serve_bind",
                 "serve_port_base": "edge_llm_serve_port_base", "health_retries": "edge_llm_serve_health_retries",
                 "health_delay": "edge_llm_serve_health_delay", "health_timeout": "edge_llm_serve_health_timeout"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        mode = args.get("mode") or "deploy"
        if mode not in ("deploy", "rollback"):
            raise AnsibleActionFail(f"edge_llm.fleet.deploy: mode must be deploy or rollback, not {mode!r}")
        models = list(args.get("models") or [])
        gate = boolean(args.get("health_gate", True), strict=False)
        try:
            install = self._install(args, task_vars) if mode == "deploy" else {}
            qairt = {m["name"]: m["qairt"] for m in install.get("models") or []}
            names = list(qairt) if mode == "deploy" else [m["name"] for m in models]
            expects = {n: version_switch.gate_expect(str(args.get("board") or ""), args.get("board_facts"), models,
                                                   args.get("prompt"), n, qairt.get(n)) for n in names}
            serve = version_switch.Serve(
                version_switch.serve_expect(str(args.get("board") or ""), args.get("board_facts"), models),
                **({"bind": str(args["serve_bind"])} if args.get("serve_bind") else {}),
                **({"port_base": int(args["serve_port_base"])} if args.get("serve_port_base") else {}),
                health={"retries": int(args.get("health_retries", 30)), "delay": float(args.get("health_delay", 1)),
                        "timeout": float(args.get("health_timeout", 5))})
        except Exception as exc:  # ValueError/UserError from the inventory contract or the catalog
            raise AnsibleActionFail(f"edge_llm_deploy: {exc}") from exc
        try:
            result = self._run(result, task_vars, mode, install, models, expects, gate,
                               boolean(args.get("prune", True), strict=False), serve)
            if mode == "deploy" and not (self._task.check_mode or self._play_context.check_mode):
                # a release's verify.eval: the switched model stays only when its eval score holds
                result = eval_action.after_deploy(self, result, task_vars, models, args, gate, serve)
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _install(self, args: dict, task_vars) -> dict:
        """What this board pulls: the ``install`` argument, else the artifact index (``edge_llm_deploy_index``)
        planned for the board's models (provisioner.fleet.shared.deploy_index, as the ``board_install`` filter does)."""
        if args.get("install"):
            return dict(args["install"])
        index = self._var(task_vars, "edge_llm_deploy_index")
        if not index:
            raise AnsibleActionFail("edge_llm_deploy_index is empty: pass the artifact index (provisioner fleet "
                                    "deploy --artifacts DIR --artifact-url URL)")
        staging = self._var(task_vars, "edge_llm_deploy_staging")
        return deploy_index.board_install(dict(index), list(args.get("models") or []), str(args.get("board") or ""),
                                          **({"staging": str(staging)} if staging else {}))

    def _call(self, module_args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)

    def _run(self, result, task_vars, mode, install, models, expects, gate, prune, serve):
        if mode == "deploy":
            first = self._call(deploy.install_args(install, expects, health_gate=gate, serve=serve), task_vars)
        else:
            first = self._call(rollback.rollback_args(models, expects, health_gate=gate, serve=serve), task_vars)
        if first.get("unreachable"):
            return first
        if first.get("failed") or "found" not in first:
            result.update(failed=True, msg=first.get("msg") or first.get("module_stderr") or str(first))
            return result
        found = first["found"]
        result["bytes_downloaded"] = int(first.get("bytes_downloaded") or 0)
        if self._task.check_mode or self._play_context.check_mode:
            result.update(changed=bool(first.get("changed")), edge_llm={"kind": mode, "check": True, "found": found,
                                                                       "trees": first.get("trees", [])})
            result["msg"] = "would change this board" if result["changed"] else "up to date"
            return result
        if mode == "deploy":
            # with a release eval gate the commit marks wait for the score (eval_action.after_deploy)
            hold = eval_action.gate_of(self, task_vars) is not None
            steps = deploy.deploy_steps(install, found, expects, health_gate=gate, prune=prune, serve=serve,
                                        hold_commit=hold)
        else:
            steps = rollback.rollback_steps(models, found, expects, health_gate=gate, serve=serve)
        changed = bool(first.get("changed"))
        done = []
        if steps.ops:
            second = self._call({"mode": "apply", "ops": steps.ops}, task_vars)
            if second.get("unreachable"):
                return second
            if second.get("failed"):
                result.update(failed=True, changed=True, msg=f"switch failed: {second.get('msg') or second}")
                return result
            changed = changed or bool(second.get("changed"))
            done = second.get("done") or []
        failures = (([first["error"]] if first.get("error") else []) + steps.failures
                    + version_switch.restart_failures(done, serve.health["retries"]))
        result["changed"] = changed
        result["edge_llm"] = {"kind": mode, "ok": not failures, "models": steps.models,
                              "trees": first.get("trees", []), "done": done, "failures": failures}
        if failures:
            result.update(failed=True, msg="; ".join(failures))
        else:
            result["msg"] = ", ".join(f"{n} {r.get('outcome')}" for n, r in steps.models.items()) or "nothing to do"
        return result
