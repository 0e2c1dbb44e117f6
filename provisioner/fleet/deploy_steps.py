"""The rules of ``fleet deploy`` and ``fleet rollback`` for one board, as data the board module executes.

One board costs at most two module calls (the edge_llm.fleet ``deploy`` action plugin moves the
data; the board module executes and reports facts):

1. ``install`` (or ``rollback``): the board installs trees and model versions it lacks and runs the
   smoke inference on every version that is not committed yet, then reports what it found
   (``current``, ``previous``, commit marks) - :func:`install_args`, :func:`rollback_args`.
2. ``apply``, only when something changes: the steps :func:`deploy_steps` / :func:`rollback_steps`
   derive from that report and the gate verdicts (commit marks, symlink switches, prune, fallback).

The Mender/RAUC rule (like their commit after a successful boot): a version becomes ``current``
only after it proved healthy on this board and was committed (``<version>.committed`` beside its
directory, written atomically after the gate). The gate runs on the version directory BEFORE the
switch, so ``current`` never names an unproven model. A run that finds ``current`` on an uncommitted
version (a controller that died mid-switch, an older playbook) gates it again and takes ``current``
off it when it fails: whatever point the controller died at, a rerun converges.

edge-llm-serve loads its model ONCE, at start, through the runtime's C API: moving ``current``
changes nothing for a running instance. So when ``current`` moves on a board where ``fleet launch``
started the model's instance (its config file exists), call 2 also rewrites that instance's config
and drop-in for the version ``current`` now names - with that version's own QAIRT, by the launch's
rule (:func:`provisioner.fleet.service.units`) - ``systemctl try-restart``s it and waits for GET
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
from provisioner.fleet import deploy_index, service, verdict
from provisioner.fleet.serve_config import smoke_run

#: stands for a version's own QAIRT in rollback's smoke run; the board fills it in from that version's
#: model.json ("qairt", which deploy writes), or with ``default_qairt`` when the version has none
QAIRT_SLOT = "{qairt}"


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
    plan = service.units(dataclasses.replace(serve.expect, models=models), bind=serve.bind, port_base=serve.port_base)
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
    inst = service.keep_board_endpoint(inst, launched.get("config"))
    ops: list[dict[str, Any]] = []
    config = service.config_text(inst["config"])
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


def _smoke(expect: HostVars, model_dir: str) -> dict[str, Any] | None:
    m = expect.models[0] if expect.models else None
    if m is None or not expect.smoke:
        return None
    return smoke_run(expect.board, m, expect.prompt, expect.max_tokens, model_dir=model_dir)


def judge(expect: HostVars, name: str, run: dict[str, Any] | None) -> tuple[bool, str]:
    """The gate's verdict on one smoke run (``fleet verify``'s smoke check): (ok, message)."""
    if run is None:
        return False, "smoke inference did not run"
    v = verdict.evaluate(expect, {"runs": {name: run}}, smoke_only=True)
    return (True, f"{len(v['checks'])} checks passed") if v["ok"] else (False, "; ".join(v["failures"]))


def install_args(install: dict[str, Any], expects: dict[str, HostVars], *, health_gate: bool,
                 serve: Serve | None = None) -> dict[str, Any]:
    """Arguments of call 1 (mode=install): the board install plan and, per model, its smoke run and where
    its launched instance's files are (the board reports them, and each version's model.json QAIRT)."""
    models = [{**{k: m[k] for k in ("name", "version", "dir", "version_dir", "partial_dir", "current", "previous",
                                    "committed", "fetch", "meta")}, "instance": instance_paths(serve, m["name"])}
              for m in install["models"]]
    runs = {}
    if health_gate:
        for m in install["models"]:
            run = _smoke(expects[m["name"]], m["version_dir"])
            if run is not None:
                runs[m["name"]] = run
    return {"mode": "install", "trees": install["trees"], "models": models, "runs": runs,
            "artifact_mark": deploy_index.ARTIFACT_MARK, "meta_name": on_board.MODEL_META}


def _commit(path: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"op": "write", "path": path, "content": json.dumps(content, indent=4, sort_keys=True) + "\n"}


def deploy_steps(install: dict[str, Any], found: dict[str, dict[str, Any]], expects: dict[str, HostVars], *,
                 health_gate: bool, prune: bool, serve: Serve | None = None) -> Steps:
    """Call 2 from call 1's report ``found`` (per model: installed, committed, old, old_previous, run,
    instance, qairt)."""
    steps = Steps()
    for m in install["models"]:
        info = found.get(m["name"])
        if info is None:            # call 1 stopped before this model (a failed download)
            continue
        name, version, old = m["name"], m["version"], info.get("old") or ""
        row: dict[str, Any] = {"version": version, "from": old or None, "gate": None}
        steps.models[name] = row
        if not info.get("committed"):
            ok, msg = True, ""
            if health_gate:
                ok, msg = judge(expects[name], name, info.get("run"))
                row["gate"] = "ok" if ok else "failed"
            if not ok:
                steps.failures.append(_fallback(steps, m, info, msg, serve))
                continue
            steps.ops.append(_commit(m["committed"], {"name": name, "version": version, "qairt": m["qairt"],
                                                      "gated": bool(health_gate), "gate": msg}))
        if old != version:
            if old:
                steps.ops.append({"op": "link", "path": m["previous"], "target": old})
            steps.ops.append({"op": "link", "path": m["current"], "target": version})
        steps.ops += serve_ops(serve, name, version, m["qairt"], info, moved=old != version)
        if old != version and prune:
            steps.ops.append({"op": "prune", "dir": m["dir"], "keep": [version, old],
                              "suffix": deploy_index.COMMITTED})
        row["outcome"] = f"current {version}"
    return steps


def _fallback(steps: Steps, m: dict[str, Any], info: dict[str, Any], gate_error: str, serve: Serve | None) -> str:
    """Take ``current`` off a version that failed its gate: back to the one before it, or nothing at all
    (a launched instance then serves the fallback, on the fallback's own QAIRT)."""
    version, old, old_previous = m["version"], info.get("old") or "", info.get("old_previous") or ""
    fallback = old if old != version else (old_previous if old_previous != version else "")
    if not fallback:
        steps.ops += [{"op": "unlink", "path": m["current"]}, {"op": "stop", "unit": m["unit"]}]
        outcome = f"no version to fall back to: current removed, {m['unit']} stopped"
    elif old == version:
        steps.ops.append({"op": "link", "path": m["current"], "target": fallback})
        outcome = f"current rolled back to {fallback}"
    else:
        outcome = f"current stays on {fallback}"
    if fallback:
        steps.ops += serve_ops(serve, m["name"], fallback, version_qairt(info, fallback, m["qairt"]), info,
                               moved=old == version)
    steps.models[m["name"]]["outcome"] = outcome
    return f"health gate failed: {m['name']} {version} not committed, {outcome} ({gate_error})"


def rollback_args(models: list[dict[str, Any]], expects: dict[str, HostVars], *,
                  health_gate: bool, serve: Serve | None = None) -> dict[str, Any]:
    """Arguments of call 1 (mode=rollback): each model's links, its instance's files and a smoke run on its
    ``previous`` with that version's own QAIRT (:data:`QAIRT_SLOT`, filled in on the board from its model.json)."""
    out, runs = [], {}
    for m in models:
        paths = deploy_index.model_paths(m["name"])
        expect = expects[m["name"]]
        out.append({"name": m["name"], "dir": paths["dir"], "current": paths["current"],
                    "previous": paths["previous"], "instance": instance_paths(serve, m["name"]),
                    "default_qairt": expect.models[0].qairt if expect.models else ""})
        slotted = dataclasses.replace(expect, models=tuple(dataclasses.replace(x, qairt=QAIRT_SLOT)
                                                           for x in expect.models))
        run = _smoke(slotted, paths["previous"]) if health_gate else None
        if run is not None:      # through the link: call 1 and call 2 see the same target
            runs[m["name"]] = run
    return {"mode": "rollback", "models": out, "runs": runs, "qairt_slot": QAIRT_SLOT, "meta_name": on_board.MODEL_META}


def rollback_expect(expect: HostVars, info: dict[str, Any]) -> HostVars:
    """The rollback gate judges ``previous`` against the QAIRT it was compiled for (what call 1 ran it with)."""
    q = version_qairt(info, info.get("previous") or "", "")
    return dataclasses.replace(expect, models=tuple(dataclasses.replace(x, qairt=q) for x in expect.models)) \
        if q else expect


def rollback_steps(models: list[dict[str, Any]], found: dict[str, dict[str, Any]], expects: dict[str, HostVars], *,
                   health_gate: bool, serve: Serve | None = None) -> Steps:
    """Same rule as deploy: ``previous`` becomes ``current`` only once it passed its gate and is committed."""
    steps = Steps()
    for m in models:
        name = m["name"]
        info = found.get(name) or {}
        paths = deploy_index.model_paths(name)
        to, cur = info.get("previous") or "", info.get("current") or ""
        if not to:
            steps.failures.append(f"{name} has no previous version on this board -> deploy one first")
            continue
        row: dict[str, Any] = {"version": to, "from": cur or None, "gate": None}
        steps.models[name] = row
        ok, msg = True, ""
        expect = rollback_expect(expects[name], info)
        if health_gate:
            ok, msg = judge(expect, name, info.get("run"))
            row["gate"] = "ok" if ok else "failed"
        if not ok:
            row["outcome"] = f"current stays on {cur or 'nothing'}"
            steps.failures.append(f"health gate failed: {name} {to} not rolled back to, current stays on "
                                  f"{cur or 'nothing'} ({msg})")
            continue
        steps.ops.append(_commit(f"{paths['dir']}/{to}{deploy_index.COMMITTED}",
                                 {"name": name, "version": to, "gated": bool(health_gate), "gate": msg}))
        steps.ops.append({"op": "link", "path": paths["current"], "target": to})
        if cur:
            steps.ops.append({"op": "link", "path": paths["previous"], "target": cur})
        qairt = expect.models[0].qairt if expect.models else ""
        steps.ops += serve_ops(serve, name, to, qairt, info, moved=True)
        row["outcome"] = f"current {to}"
    return steps
