"""Controller side of edge_llm.fleet.eval: a suite's requests to every serving instance, the answers scored here.

One board module call per board (edge_llm.fleet.eval sends the requests through edge-llm-serve on the board's
loopback with the board's token, read there); the suite, the scoring and the minimum score are
provisioner.fleet.eval's. The payload (kind ``eval``) is the task's ``edge_llm`` result.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import BoardAction, inventory, launch
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.eval_action import fleet_eval, instances_of


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("expect", "eval", "bind", "port_base", "timeout", "health_retries"))
    VARIABLES = {"eval": "edge_llm_eval", "bind": "edge_llm_serve_bind", "port_base": "edge_llm_serve_port_base",
                 "timeout": "edge_llm_eval_timeout", "health_retries": "edge_llm_eval_health_retries"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        try:
            suite, min_score = fleet_eval.from_vars(args.get("eval"))
            expect = inventory.HostVars.from_vars(self._expect_vars(args, task_vars))
            plan = launch.units(expect, bind=str(args.get("bind") or "127.0.0.1"),
                                 port_base=int(args.get("port_base") or 8080))
        except Exception as exc:  # ValueError of the vars or the suite, UserError of the catalog
            raise AnsibleActionFail(f"edge_llm_eval: {exc}") from exc
        result["changed"] = False
        if self._play_context.check_mode:
            result.update(skipped=True, msg="check mode: no requests sent")
            return result
        health = dict(fleet_eval.HEALTH, health_retries=int(args.get("health_retries") or 30))
        payload = fleet_eval.run(lambda name, margs: self._module(name, margs, task_vars), suite,
                                instances_of(plan), plan["token_file"], min_score, health,
                                int(args.get("timeout") or 120))
        if payload.get("unreachable"):
            return payload
        result["edge_llm"] = payload
        if payload["failures"]:
            result.update(failed=True, msg="; ".join(payload["failures"]))
        else:
            result["msg"] = ", ".join(f"{m} {r['score']:.2f}" for m, r in payload["models"].items())
        return result
