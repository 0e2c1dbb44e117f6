"""Controller side of edge_llm.fleet.verify: build the probe spec, run the board module once, judge the result.

All board knowledge (layout paths, thresholds, output parsers, the known failure signatures) is in
provisioner.fleet.verify (it builds the spec and judges the answers); this plugin only moves data
between them and the board.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import (
    BoardAction,
    benchmark,
    inventory,
    verify,
)


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("expect", "only_model", "smoke_only", "model_dir", "keep_probe", "repeat"))
    VARIABLES = {"keep_probe": "edge_llm_verify_keep_probe"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        try:
            expect = inventory.HostVars.from_vars(self._expect_vars(args, task_vars))
        except (ValueError, TypeError) as exc:
            raise AnsibleActionFail(f"edge_llm_verify: {exc}") from exc
        except Exception as exc:  # UserError from the catalog (unknown board id)
            raise AnsibleActionFail(f"edge_llm_verify: {exc}") from exc
        smoke_only = bool(args.get("smoke_only", False))
        repeat = int(args.get("repeat") or 1)
        spec = verify.probe_spec(expect, only_model=args.get("only_model"), smoke_only=smoke_only,
                                      model_dir_override=args.get("model_dir") or None, repeat=repeat)
        raw, stop = self._probe(spec, task_vars, result)
        if stop is not None:
            return stop
        found = raw["probe"]
        verdict = verify.evaluate(expect, found, smoke_only=smoke_only)
        if args.get("only_model"):
            verdict["models"] = {k: v for k, v in verdict["models"].items() if k == args["only_model"]}
        result["changed"] = False
        if repeat > 1:
            verdict["kind"] = "benchmark"
            verdict["benchmark"] = benchmark.benchmark_summary(expect, found.get("repeats") or {})
            result["edge_llm"] = verdict
        else:
            result["edge_llm"] = {"kind": "verify", **verdict}
        if boolean(args.get("keep_probe", False), strict=False):
            result["probe"] = found
        if not verdict["ok"]:
            result["failed"] = True
            result["msg"] = "; ".join(verdict["failures"])
        else:
            result["msg"] = f"{len(verdict['checks'])} checks passed"
        return result
