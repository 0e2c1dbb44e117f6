"""Controller side of edge_llm.fleet.benchmark: repeated smoke runs and the streaming API bench in one task.

One board module call per board: edge_llm.fleet.verify with the spec's runs repeated (medians judged by
provisioner.fleet.verify, as ``fleet verify`` judges one run) and, in the same call, its ``api`` option: the
streaming bench of edge_llm.fleet.api against the instances ``fleet launch`` started (ports and token file
from provisioner.fleet.launch; the module reads the token on the board). The combined payload is the
task's ``edge_llm`` result and, when ``dir`` is set, ``<dir>/<host>.json`` on the controller, where an
action plugin runs: no per-board copy task.
"""

from __future__ import annotations

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import (
    BoardAction,
    benchmark,
    inventory,
    launch,
    verify,
)


def save(directory: str, host: str, payload: dict) -> str:
    """Write ``payload`` to ``<directory>/<host>.json`` in one rename (a reader never sees half a file)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{host}.json")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{host}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(payload, indent=4, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("expect", "runs", "prompt", "max_tokens", "api", "bind", "port_base", "address",
                             "timeout", "dir"))
    VARIABLES = {"runs": "edge_llm_benchmark_runs", "prompt": "edge_llm_benchmark_prompt",
                 "max_tokens": "edge_llm_benchmark_max_tokens", "api": "edge_llm_benchmark_api",
                 "dir": "edge_llm_benchmark_dir", "bind": "edge_llm_serve_bind",
                 "port_base": "edge_llm_serve_port_base"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        runs = max(1, int(args.get("runs") or 5))
        expect_vars = self._expect_vars(args, task_vars)
        if args.get("prompt"):
            expect_vars["edge_llm_verify_prompt"] = args["prompt"]
        if args.get("max_tokens"):
            expect_vars["edge_llm_verify_max_tokens"] = args["max_tokens"]
        try:
            expect = inventory.HostVars.from_vars(expect_vars)
            spec = verify.probe_spec(expect, smoke_only=True, repeat=runs)
        except Exception as exc:  # ValueError/TypeError of the vars, UserError of the catalog (unknown board id)
            raise AnsibleActionFail(f"edge_llm_benchmark: {exc}") from exc
        api_on = boolean(args.get("api", True), strict=False) and not self._play_context.check_mode
        more = {}
        if api_on:
            try:
                plan = launch.units(expect, bind=str(args.get("bind") or "127.0.0.1"),
                                     port_base=int(args.get("port_base") or 8080))
            except ValueError as exc:
                raise AnsibleActionFail(f"edge_llm_benchmark: {exc}") from exc
            # the API bench runs in the same board call, after the smoke runs: one call per board
            keep = ("model", "unit", "port", "bind")       # unit: the listener is checked before the token goes
            more["api"] = {"instances": [{k: i[k] for k in keep} for i in plan["instances"]],
                           "token_file": plan["token_file"],
                           "address": args.get("address") or self._address(task_vars), "runs": runs,
                           "prompt": expect.prompt, "max_tokens": expect.max_tokens,
                           "timeout": int(args.get("timeout") or 120)}
        raw, stop = self._probe(spec, task_vars, result, **more)
        if stop is not None:
            return stop
        found = raw["probe"]
        payload = verify.evaluate(expect, found, smoke_only=True)
        payload["kind"] = "benchmark"
        # the gatherer lists ``repeats`` only for more than one run; a single run is its ``runs`` entry
        repeats = found.get("repeats") or {name: [run] for name, run in (found.get("runs") or {}).items()}
        payload["benchmark"] = benchmark.benchmark_summary(expect, repeats)
        payload["api"] = {}
        result["changed"] = False
        problems = list(payload["failures"]) if not payload["ok"] else []
        if payload["ok"] and more:       # API figures of a board whose smoke runs failed are not reported
            api = raw.get("api") or {}
            payload["api"] = dict(api.get("api") or {})
            problems.extend(api.get("problems") or [])
        if args.get("dir") and not self._play_context.check_mode:
            save(str(args["dir"]), str(task_vars.get("inventory_hostname") or self._task.get_name()), payload)
        result["edge_llm"] = payload
        if problems:
            result["failed"] = True
            result["msg"] = "; ".join(problems)
        else:
            result["msg"] = f"{runs} runs per model" + (" (smoke and API)" if payload["api"] else "")
        return result
