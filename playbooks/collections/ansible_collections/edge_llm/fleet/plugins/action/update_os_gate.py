"""Controller side of edge_llm.fleet.update_os_gate: the health gate of fleet update-os in one task.

After the reboot into the new OSTree deployment it asks the board (edge_llm.fleet.ostree mode=state)
whether that deployment came up, runs the verify module once (identity, BUILD_ID, FastRPC, memlock,
smoke inference; the same call reads whether each serving instance is enabled), and on a board whose
instances fleet launch enabled, waits for /health and streams one chat completion through the
serving API with edge_llm.fleet.api (which reads the board's token file itself). The rules live in
provisioner.fleet.update_os / verdict; this plugin only moves data between them and the board.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.edge_llm.fleet.plugins.plugin_utils import eval_action
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import BoardAction, inventory, update_os


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("expect", "commit", "state_file", "api", "serve_bind", "serve_port_base",
                             "health_retries", "health_delay", "health_timeout", "prompt", "max_tokens"))
    VARIABLES = {"commit": "edge_llm_update_os_commit", "state_file": "edge_llm_update_os_state_file",
                 "api": "edge_llm_update_os_api",
                 "serve_bind": "edge_llm_serve_bind", "serve_port_base": "edge_llm_serve_port_base",
                 "health_retries": "edge_llm_update_os_health_retries",
                 "health_delay": "edge_llm_update_os_health_delay", "prompt": "edge_llm_update_os_prompt"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        try:
            expect_vars = self._expect_vars(args, task_vars)
            if not args.get("expect"):
                # the gate's own smoke run: the update-os prompt, always run, the board's sha256 cache trusted
                expect_vars.update(edge_llm_verify_smoke=True, edge_llm_verify_rehash=False,
                                   edge_llm_verify_prompt=args.get("prompt") or inventory.SMOKE_PROMPT,
                                   edge_llm_verify_max_tokens=args.get("max_tokens") or inventory.SMOKE_MAX_TOKENS)
            expect = inventory.HostVars.from_vars(expect_vars)
        except Exception as exc:  # ValueError, or a UserError from the catalog (unknown board id)
            raise AnsibleActionFail(f"edge_llm_update_os_gate: {exc}") from exc
        commit = str(args.get("commit") or "")
        where = {"commit": commit, **({"state_file": args["state_file"]} if args.get("state_file") else {})}
        state = self._module("edge_llm.fleet.ostree", {"mode": "state", **where}, task_vars)
        if state.get("unreachable") or state.get("failed"):
            return state
        facts = state.get("state") or {}
        booted = facts.get("booted") or ""
        result["changed"] = False
        pending = (facts.get("record") or {}).get("pending") or {}
        if pending.get("commit") == commit and pending.get("phase") == "rolling back":
            # a rollback a killed controller left half done: finish it for the reason it had
            result.update(failed=True, msg=str(pending.get("why") or "rolled back"))
            return result
        if booted != commit:
            result.update(failed=True, msg=f"the new deployment {commit[:12]} did not boot; boot counting fell "
                                           f"back to {booted[:12] or '(none)'}")
            return result
        raw, stop = self._probe(update_os.gate_spec(expect), task_vars, result)
        if stop is not None:
            return stop
        found = raw["probe"]
        api, step = None, update_os.API_SKIPPED
        serve = update_os.enabled_instances(expect, found, bind=str(args.get("serve_bind") or "127.0.0.1"),
                                            port_base=int(args.get("serve_port_base") or 8080))
        if boolean(args.get("api", True), strict=False) and serve["lost"]:
            step = update_os.lost_step(serve["lost"])
        elif boolean(args.get("api", True), strict=False) and serve["instances"]:
            step = update_os.API_RAN
            # one call: the module waits for each instance's /health (the service starts at boot and loads
            # its model), then streams a chat completion; the token is read on the board, never an argument
            bench = self._module("edge_llm.fleet.api", {
                "instances": serve["instances"], "token_file": serve["token_file"], "mode": "bench", "runs": 1,
                "address": self._address(task_vars),
                "prompt": args.get("prompt") or expect.prompt,
                "max_tokens": int(args.get("max_tokens") or expect.max_tokens),
                "health_retries": int(args.get("health_retries") or 30),
                "health_delay": float(args.get("health_delay") or 2),
                "health_timeout": float(args.get("health_timeout") or 5)}, task_vars)
            if bench.get("unreachable"):
                return bench
            figures = ((bench.get("edge_llm") or {}).get("api")) or {}
            none = {"n": 0, "failed": 1, "errors": [str(bench.get("msg") or "no answer")[:200]]}
            api = {i["model"]: figures.get(i["model"]) or none for i in serve["instances"]}
        verdict = update_os.judge(expect, found, api, step)
        gone = eval_action.in_update_os_gate(self, task_vars, serve, verdict)   # a release's verify.eval
        if gone is not None:
            return gone
        result["edge_llm"] = {"kind": "verify", **verdict}
        if not verdict["ok"]:
            result.update(failed=True, msg="; ".join(verdict["failures"]))
            return result
        # passed: commit in the same task (the update ends), so a healthy board costs no extra task
        done = self._module("edge_llm.fleet.ostree", {"mode": "commit", **where}, task_vars)
        if done.get("unreachable"):
            return done
        if done.get("failed"):
            result.update(failed=True, msg=f"health gate passed, but committing the deployment failed: "
                                           f"{done.get('msg') or done}")
            return result
        result["changed"] = bool(done.get("changed"))
        result["edge_llm"] = [result["edge_llm"], done.get("edge_llm") or {"kind": "update-os", "outcome": "updated"}]
        result["msg"] = f"{len(verdict['checks'])} checks passed (serving API: {step}); deployment committed"
        return result
