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
switch, so the live service (it reads ``current`` on every request) never serves an unproven model.
A run that finds ``current`` on an uncommitted version (a controller that died mid-switch, an older
playbook) gates it again and takes ``current`` off it when it fails: whatever point the controller
died at, a rerun converges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from provisioner import layout
from provisioner.contracts.inventory import HostVars
from provisioner.fleet import deploy_index, verdict
from provisioner.fleet.serve_config import smoke_run


@dataclass
class Steps:
    """What call 2 must do on the board and what the run reports."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)   # per model: version, gate, outcome


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


def install_args(install: dict[str, Any], expects: dict[str, HostVars], *, health_gate: bool) -> dict[str, Any]:
    """Arguments of call 1 (mode=install): the board install plan and, per model, its smoke run."""
    models = [{k: m[k] for k in ("name", "version", "version_dir", "partial_dir", "current", "previous",
                                 "committed", "fetch", "meta")} for m in install["models"]]
    runs = {}
    if health_gate:
        for m in install["models"]:
            run = _smoke(expects[m["name"]], m["version_dir"])
            if run is not None:
                runs[m["name"]] = run
    return {"mode": "install", "trees": install["trees"], "models": models, "runs": runs,
            "artifact_mark": deploy_index.ARTIFACT_MARK, "meta_name": layout.MODEL_META}


def _commit(path: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"op": "write", "path": path, "content": json.dumps(content, indent=4, sort_keys=True) + "\n"}


def deploy_steps(install: dict[str, Any], found: dict[str, dict[str, Any]], expects: dict[str, HostVars], *,
                 health_gate: bool, prune: bool) -> Steps:
    """Call 2 from call 1's report ``found`` (per model: installed, committed, old, old_previous, run)."""
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
                steps.failures.append(_fallback(steps, m, info, msg))
                continue
            steps.ops.append(_commit(m["committed"], {"name": name, "version": version, "qairt": m["qairt"],
                                                      "gated": bool(health_gate), "gate": msg}))
        if old != version:
            if old:
                steps.ops.append({"op": "link", "path": m["previous"], "target": old})
            steps.ops.append({"op": "link", "path": m["current"], "target": version})
            if prune:
                steps.ops.append({"op": "prune", "dir": m["dir"], "keep": [version, old],
                                  "suffix": deploy_index.COMMITTED})
        row["outcome"] = f"current {version}"
    return steps


def _fallback(steps: Steps, m: dict[str, Any], info: dict[str, Any], gate_error: str) -> str:
    """Take ``current`` off a version that failed its gate: back to the one before it, or nothing at all."""
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
    steps.models[m["name"]]["outcome"] = outcome
    return f"health gate failed: {m['name']} {version} not committed, {outcome} ({gate_error})"


def rollback_args(models: list[dict[str, Any]], expects: dict[str, HostVars], *,
                  health_gate: bool) -> dict[str, Any]:
    """Arguments of call 1 (mode=rollback): each model's links and a smoke run on its ``previous``."""
    out, runs = [], {}
    for m in models:
        paths = deploy_index.model_paths(m["name"])
        out.append({"name": m["name"], "current": paths["current"], "previous": paths["previous"]})
        run = _smoke(expects[m["name"]], paths["previous"]) if health_gate else None
        if run is not None:      # through the link: call 1 and call 2 see the same target
            runs[m["name"]] = run
    return {"mode": "rollback", "models": out, "runs": runs}


def rollback_steps(models: list[dict[str, Any]], found: dict[str, dict[str, Any]], expects: dict[str, HostVars], *,
                   health_gate: bool) -> Steps:
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
        if health_gate:
            ok, msg = judge(expects[name], name, info.get("run"))
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
        row["outcome"] = f"current {to}"
    return steps
