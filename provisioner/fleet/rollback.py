"""The model rollback rule: when a version may become ``current``, and where ``current`` goes when it may not.

The Mender/RAUC rule (like their commit after a successful boot): a version becomes ``current``
only after it proved healthy on this board and was committed (``<version>.committed`` beside its
directory, written atomically after the gate). The gate runs on the version directory BEFORE the
switch, so ``current`` never names an unproven model. A run that finds ``current`` on an uncommitted
version (a controller that died mid-switch, an older playbook) gates it again and takes ``current``
off it when it fails (:func:`fallback`, which ``fleet deploy`` calls): whatever point the controller
died at, a rerun converges.

``fleet rollback`` (the edge_llm.fleet ``deploy`` action with mode=rollback) follows the same rule
backwards: call 1 (:func:`rollback_args`) runs the smoke inference on ``previous`` with that version's
own QAIRT; call 2 (:func:`rollback_steps`) commits it and swaps ``current`` and ``previous`` only when it
passed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import HostVars
from provisioner.fleet.shared import deploy_index
from provisioner.fleet.shared.version_switch import (
    Serve,
    Steps,
    commit_op,
    instance_paths,
    judge,
    serve_ops,
    smoke,
    version_qairt,
)

#: stands for a version's own QAIRT in rollback's smoke run; the board fills it in from that version's
#: model.json ("qairt", which deploy writes), or with ``default_qairt`` when the version has none
QAIRT_SLOT = "{qairt}"


def fallback(steps: Steps, m: dict[str, Any], info: dict[str, Any], gate_error: str, serve: Serve | None) -> str:
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
        run = smoke(slotted, paths["previous"]) if health_gate else None
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
        steps.ops.append(commit_op(f"{paths['dir']}/{to}{deploy_index.COMMITTED}",
                                 {"name": name, "version": to, "gated": bool(health_gate), "gate": msg}))
        steps.ops.append({"op": "link", "path": paths["current"], "target": to})
        if cur:
            steps.ops.append({"op": "link", "path": paths["previous"], "target": cur})
        qairt = expect.models[0].qairt if expect.models else ""
        steps.ops += serve_ops(serve, name, to, qairt, info, moved=True)
        row["outcome"] = f"current {to}"
    return steps
