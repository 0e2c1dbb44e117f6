"""The rules of ``fleet deploy`` for one board, as data the board module executes.

One board costs at most two module calls (the edge_llm.fleet ``deploy`` action plugin moves the
data; the board module executes and reports facts):

1. ``install``: the board installs trees and model versions it lacks and runs the smoke inference on
   every version that is not committed yet, then reports what it found (``current``, ``previous``,
   commit marks) - :func:`install_args`.
2. ``apply``, only when something changes: the steps :func:`deploy_steps` derives from that report and
   the gate verdicts (commit marks, symlink switches, prune, and the fallback of
   :mod:`provisioner.fleet.rollback` when a gate fails).

When a version becomes ``current`` and what happens when its gate fails is the rollback rule
(:mod:`provisioner.fleet.rollback`); moving the links and the launched instance is
:mod:`provisioner.fleet.shared.version_switch`.
"""

from __future__ import annotations

from typing import Any

from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import HostVars
from provisioner.fleet.rollback import fallback
from provisioner.fleet.shared import deploy_index
from provisioner.fleet.shared.version_switch import Serve, Steps, commit_op, instance_paths, judge, serve_ops, smoke


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
            run = smoke(expects[m["name"]], m["version_dir"])
            if run is not None:
                runs[m["name"]] = run
    return {"mode": "install", "trees": install["trees"], "models": models, "runs": runs,
            "artifact_mark": deploy_index.ARTIFACT_MARK, "meta_name": on_board.MODEL_META}


def deploy_steps(install: dict[str, Any], found: dict[str, dict[str, Any]], expects: dict[str, HostVars], *,
                 health_gate: bool, prune: bool, serve: Serve | None = None, hold_commit: bool = False) -> Steps:
    """Call 2 from call 1's report ``found`` (per model: installed, committed, old, old_previous, run,
    instance, qairt).

    ``hold_commit`` (a release with an eval gate): a new version's commit mark is not written here but
    left in its row as ``commit_op``, for the eval gate to write once the score holds. A board lost
    mid-eval then leaves the version current but uncommitted, and the next run judges it again: such a
    version (current, not committed) reports the version before it as ``from``."""
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
                steps.failures.append(fallback(steps, m, info, msg, serve))
                continue
            mark = commit_op(m["committed"], {"name": name, "version": version, "qairt": m["qairt"],
                                              "gated": bool(health_gate), "gate": msg})
            if hold_commit:
                row["commit_op"] = mark
                if old == version:      # switched by a run that never got to judge it: judged now
                    row["from"] = info.get("old_previous") or None
            else:
                steps.ops.append(mark)
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
