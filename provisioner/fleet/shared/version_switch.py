"""Moving a board's model version: the steps call 2 runs, the launched instance that must follow, the gate.

What ``fleet deploy`` (:mod:`provisioner.fleet.deploy`) and ``fleet rollback``
(:mod:`provisioner.fleet.rollback`) both do once they know which version becomes ``current``: write a commit
mark, move the links, make a launched edge-llm-serve instance serve the new version and judge the health gate.

edge-llm-serve loads its model ONCE, at start, through the runtime's C API: moving ``current``
changes nothing for a running instance. So when ``current`` moves on a board where ``fleet launch``
started the model's instance (its config file exists), call 2 also rewrites that instance's config
and drop-in for the version ``current`` now names - with that version's own QAIRT, by the launch's
rule (:func:`provisioner.fleet.launch.units`) - ``systemctl try-restart``s it and waits for GET
/health (:func:`serve_ops`). A config that differs from that rule (a run that died between the switch
and the restart) is rewritten and restarted the same way on the rerun.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import HostVars
from provisioner.fleet import launch, verify
from provisioner.fleet.shared.serve_config import smoke_run


@dataclass
class Steps:
    """What call 2 must do on the board and what the run reports."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)   # per model: version, gate, outcome


@dataclass
class Serve:
    """How the launch runs this board's instances: all its models (model i listens on port_base + i, as
    ``fleet launch`` numbers them), the same bind/port_base variables, and the /health wait after a restart."""

    expect: HostVars
    bind: str = "127.0.0.1"
    port_base: int = on_board.SERVE_BASE_PORT
    health: dict[str, float] = field(default_factory=lambda: {"retries": 30, "delay": 1.0, "timeout": 5.0})


def serve_expect(board: str, board_facts: dict[str, Any] | None, models: list[dict[str, Any]]) -> HostVars:
    """The board and every model of its group, for :class:`Serve`."""
    return HostVars.from_vars({"edge_llm_board": board, "edge_llm_board_facts": board_facts or {},
                               "edge_llm_models": models})


def launch_instance(serve: Serve, name: str, qairt: str) -> dict[str, Any] | None:
    """What launch writes for model ``name``'s instance (config, drop-in, unit, /health) on QAIRT ``qairt``."""
    models = tuple(dataclasses.replace(m, qairt=qairt) if m.name == name else m for m in serve.expect.models)
    plan = launch.units(dataclasses.replace(serve.expect, models=models), bind=serve.bind, port_base=serve.port_base)
    return next((i for i in plan["instances"] if i["model"] == name), None)


def instance_paths(serve: Serve | None, name: str) -> dict[str, str] | None:
    """Where call 1 looks for the instance ``fleet launch`` wrote (None: the board's group lacks the model)."""
    m = next((m for m in serve.expect.models if m.name == name), None) if serve else None
    inst = launch_instance(serve, name, m.qairt) if serve and m else None
    return {"config_path": inst["config_path"], "dropin_path": inst["dropin_path"]} if inst else None


def serve_ops(serve: Serve | None, name: str, version: str, qairt: str, info: dict[str, Any],
              moved: bool) -> list[dict[str, Any]]:
    """Steps that make a launched instance serve ``version``: config + drop-in for its QAIRT, try-restart, /health.

    Nothing when the model was never launched on the board (call 1 found no config file). Otherwise the
    files are rewritten when they differ from launch's rule for ``qairt``, and the instance restarts when
    ``current`` moved or a file changed; an up-to-date board gets no step.
    """
    launched = info.get("instance")
    if serve is None or not launched or not version:
        return []
    inst = launch_instance(serve, name, qairt)
    if inst is None:
        return []
    inst = launch.keep_board_endpoint(inst, launched.get("config"))
    ops: list[dict[str, Any]] = []
    config = launch.config_text(inst["config"])
    if config != launched.get("config"):
        ops.append({"op": "write", "path": inst["config_path"], "content": config})
    reload = inst["dropin"] != launched.get("dropin")
    if reload:
        ops.append({"op": "write", "path": inst["dropin_path"], "content": inst["dropin"]})
    if ops or moved:
        ops.append({"op": "restart", "unit": inst["unit"], "daemon_reload": reload, "model": name,
                    "version": version, "instance": {k: inst[k] for k in ("model", "unit", "port", "bind",
                                                                          "health_url")}, **serve.health})
    return ops


def restart_failures(done: list[dict[str, Any]], retries: float) -> list[str]:
    """A restarted instance that did not answer GET /health 200, reported like a failed gate."""
    return [f"service failed after the switch: {d['path']} restarted onto {d.get('model')} {d.get('version')}, "
            f"GET {d.get('health_url')} did not answer 200 after {int(retries)} attempts ({d['health']})"
            for d in done if d.get("op") == "restart" and d.get("health")]


def version_qairt(info: dict[str, Any], version: str, default: str) -> str:
    """The QAIRT a version on the board was compiled for (its model.json, as call 1 read it), else ``default``."""
    return str((info.get("qairt") or {}).get(version) or default)


def gate_expect(board: str, board_facts: dict[str, Any] | None, models: list[dict[str, Any]], prompt: str | None,
                name: str, qairt: str | None = None) -> HostVars:
    """What the health gate of model ``name`` checks: the board and that one model (on the QAIRT it ships for)."""
    picked = [dict(m, **({"qairt": qairt} if qairt else {})) for m in models if m.get("name") == name]
    hv: dict[str, Any] = {"edge_llm_board": board, "edge_llm_board_facts": board_facts or {}, "edge_llm_models": picked}
    if prompt:
        hv["edge_llm_verify_prompt"] = prompt
    return HostVars.from_vars(hv)


def smoke(expect: HostVars, model_dir: str) -> dict[str, Any] | None:
    """The gate's smoke run of the model ``expect`` names, on the version in ``model_dir`` (None: no smoke)."""
    m = expect.models[0] if expect.models else None
    if m is None or not expect.smoke:
        return None
    return smoke_run(expect.board, m, expect.prompt, expect.max_tokens, model_dir=model_dir)


def judge(expect: HostVars, name: str, run: dict[str, Any] | None) -> tuple[bool, str]:
    """The gate's verdict on one smoke run (``fleet verify``'s smoke check): (ok, message)."""
    if run is None:
        return False, "smoke inference did not run"
    v = verify.evaluate(expect, {"runs": {name: run}}, smoke_only=True)
    return (True, f"{len(v['checks'])} checks passed") if v["ok"] else (False, "; ".join(v["failures"]))


def commit_op(path: str, content: dict[str, Any]) -> dict[str, Any]:
    """The step that writes a version's commit mark (``<version>.committed``) with ``content``."""
    return {"op": "write", "path": path, "content": json.dumps(content, indent=4, sort_keys=True) + "\n"}
