"""Controller side of edge_llm.fleet.verify: build the probe spec, run the board module once, judge the result.

All board knowledge (layout paths, thresholds, output parsers, the known failure signatures) is in
provisioner.fleet (probe builds the spec, verdict judges the answers); this plugin only moves data
between them and the board.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# The rules live in the provisioner package, which this collection declares (requirements.txt)
# instead of reaching into a checkout: the built collection runs on any controller that has it.
try:
    from provisioner.contracts import inventory
    from provisioner.fleet import probe as fleet_probe
    from provisioner.fleet import verdict as fleet_verdict
except ImportError as exc:
    _MISSING = f"{exc}"
else:
    _MISSING = ""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("expect", "only_model", "smoke_only", "model_dir", "keep_probe", "repeat"))

    def run(self, tmp=None, task_vars=None):
        if _MISSING:
            raise AnsibleActionFail("edge_llm.fleet needs the Python package edge-llm-provisioner in the "
                                    f"controller's Python ({_MISSING}): pip install edge-llm-provisioner")
        result = super().run(tmp, task_vars)
        args = self._task.args
        try:
            expect = inventory.HostVars.from_vars(dict(args.get("expect") or {}))
        except (ValueError, TypeError) as exc:
            raise AnsibleActionFail(f"edge_llm_verify: {exc}") from exc
        except Exception as exc:  # UserError from the catalog (unknown board id)
            raise AnsibleActionFail(f"edge_llm_verify: {exc}") from exc
        smoke_only = bool(args.get("smoke_only", False))
        spec = fleet_probe.probe_spec(expect, only_model=args.get("only_model"), smoke_only=smoke_only,
                                 model_dir_override=args.get("model_dir") or None)
        repeat = int(args.get("repeat") or 1)
        for run in spec["runs"].values():
            run["repeat"] = repeat
        raw = self._execute_module(module_name="edge_llm.fleet.verify", module_args={"spec": spec},
                                   task_vars=task_vars)
        if raw.get("unreachable"):
            return raw
        if raw.get("failed") or "probe" not in raw:
            result.update(failed=True, msg=f"probe failed: {raw.get('msg') or raw.get('module_stderr') or raw}")
            return result
        verdict = fleet_verdict.evaluate(expect, raw["probe"], smoke_only=smoke_only)
        if args.get("only_model"):
            verdict["models"] = {k: v for k, v in verdict["models"].items() if k == args["only_model"]}
        result["changed"] = False
        if repeat > 1:
            verdict["kind"] = "benchmark"
            verdict["benchmark"] = fleet_verdict.benchmark_summary(expect, raw["probe"].get("repeats") or {})
            result["edge_llm"] = verdict
        else:
            result["edge_llm"] = {"kind": "verify", **verdict}
        if args.get("keep_probe"):
            result["probe"] = raw["probe"]
        if not verdict["ok"]:
            result["failed"] = True
            result["msg"] = "; ".join(verdict["failures"])
        else:
            result["msg"] = f"{len(verdict['checks'])} checks passed"
        return result
