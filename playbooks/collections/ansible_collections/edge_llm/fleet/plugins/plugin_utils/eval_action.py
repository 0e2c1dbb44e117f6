"""The eval gate inside other edge_llm.fleet actions: after a deploy switched a launched model, and in the
update-os health gate. The rules are provisioner.fleet.eval's; this only moves data between them, the
board modules and the existing rollback path of the action that calls it.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail

try:
    from provisioner.fleet import eval as fleet_eval
    from provisioner.fleet import launch
    from provisioner.fleet.shared import deploy_index, version_switch
except ImportError:          # board_action names the missing package on the first action run
    deploy_index = fleet_eval = launch = version_switch = None

__all__ = ["after_deploy", "fleet_eval", "gate_of", "in_update_os_gate", "instances_of"]


def instances_of(plan):
    """The serving plan's instances as the eval module takes them."""
    return [{k: i[k] for k in ("model", "unit", "port", "bind")} for i in plan["instances"]]


def gate_of(action, task_vars):
    """(suite, min_score) when the run carries an eval gate (``edge_llm_eval`` with a min_score), else None."""
    value = action._var(task_vars, fleet_eval.VAR)
    if not value:
        return None
    try:
        suite, min_score = fleet_eval.from_vars(value)
    except ValueError as exc:
        raise AnsibleActionFail(f"{fleet_eval.VAR}: {exc}") from exc
    return (suite, min_score) if min_score is not None else None


def after_deploy(action, result, task_vars, models, args, health_gate, serve):
    """Keep each model this deploy switched and restarted only when its eval score holds; otherwise roll it
    back (the deploy action's own rollback mode: ``previous`` gated, committed and served again) and take the
    commit mark off the version that failed, so a rerun judges it again instead of switching back to it."""
    gate = gate_of(action, task_vars)
    payload = result.get("edge_llm") or {}
    if gate is None or payload.get("kind") != "deploy":
        return result
    rows = payload.get("models") or {}
    held = {n: r.pop("commit_op") for n, r in rows.items() if "commit_op" in r}     # kept out of the report
    if result.get("failed"):         # another gate failed first: nothing is judged, marks as without a gate
        return _commit(action, task_vars, result, held, set(rows))
    suite, min_score = gate
    restarted = {d.get("model") for d in payload.get("done") or [] if d.get("op") == "restart" and not d.get("health")}
    moved = {n: r for n, r in rows.items()
             if r.get("from") != r.get("version") and str(r.get("outcome", "")).startswith("current ")}
    # a held (uncommitted) version is judged even when this run did not restart it: an earlier run switched
    # it and lost the board before its score was in
    asked = [i for i in launch.units(serve.expect, bind=serve.bind, port_base=serve.port_base)["instances"]
             if i["model"] in moved and (i["model"] in restarted or i["model"] in held)]
    unserved = sorted(set(moved) - {i["model"] for i in asked})
    if unserved:       # never launched here: nothing serves it to ask (the next fleet eval will)
        result["msg"] = f"{result.get('msg', '')}; eval skipped: {', '.join(unserved)} not served (fleet launch)"
    judged = {i["model"] for i in asked}
    if not asked:
        return _commit(action, task_vars, result, held, set(rows))
    plan = launch.units(serve.expect, bind=serve.bind, port_base=serve.port_base)
    report = fleet_eval.run(lambda name, margs: action._module(name, margs, task_vars), suite, instances_of(
        {"instances": asked}), plan["token_file"], min_score)
    if report.get("unreachable"):       # no commit mark written: the next run judges these versions again
        return report
    failed = [i["model"] for i in asked if i["model"] not in report["models"]
              or report["models"][i["model"]]["score"] < min_score]
    result["edge_llm"] = [payload, report]
    if not failed:
        result["msg"] = f"{result.get('msg', '')}; eval " + ", ".join(
            f"{m} {r['score']:.2f}" for m, r in report["models"].items())
        return _commit(action, task_vars, result, held, set(rows))
    committed = _commit(action, task_vars, result, held, set(rows) - judged)
    if committed is not result:
        return committed
    # a version that fails the gate does not serve: back to the one before it (the rollback mode), or, on a first
    # install, nothing at all (current removed, the instance stopped), as the smoke gate's fallback does
    back = [m for m in models if m.get("name") in failed and moved[m["name"]].get("from")]
    alone = [n for n in failed if not moved[n].get("from")]
    outcomes = []
    rolled = {}
    if back:
        expects = {m["name"]: version_switch.gate_expect(str(args.get("board") or ""), args.get("board_facts"),
                                                         models, args.get("prompt"), m["name"]) for m in back}
        rolled = action._run({}, task_vars, "rollback", {}, back, expects, health_gate, False, serve)
        if rolled.get("unreachable"):
            return rolled
        outcomes += ([f"{m['name']} {moved[m['name']]['version']} rolled back to {moved[m['name']]['from']}"
                      for m in back] if not rolled.get("failed") else [f"rollback failed: {rolled.get('msg')}"])
    ops = [{"op": "unlink", "path": f"{deploy_index.model_paths(n)['dir']}/{moved[n]['version']}"
                                   f"{deploy_index.COMMITTED}"} for n in failed]
    for n in alone:
        paths = deploy_index.model_paths(n)
        ops += [{"op": "unlink", "path": paths["current"]}, {"op": "stop", "unit": paths["unit"]}]
        outcomes.append(f"{n} {moved[n]['version']}: no version to fall back to, current removed, {paths['unit']} "
                        "stopped")
    done = action._call({"mode": "apply", "ops": ops}, task_vars)
    if done.get("unreachable"):
        return done
    if done.get("failed"):
        outcomes.append(f"taking the failed version off failed: {done.get('msg')}")
    result["edge_llm"].append(rolled.get("edge_llm") or {"kind": "rollback", "ok": not alone and bool(back),
                                                         "done": done.get("done") or []})
    result.update(failed=True, changed=True,
                  msg=f"eval gate failed, {'; '.join(outcomes)}: {'; '.join(report['failures'])}")
    return result

def _commit(action, task_vars, result, held, names):
    """Write the held commit marks (``commit_op`` of deploy_steps with ``hold_commit``) of ``names``: the
    versions whose score held, or that no eval here could judge. Returns ``result``, or the board's
    answer when it went away (those versions stay uncommitted, so the next run judges them)."""
    ops = [held[n] for n in sorted(names) if n in held]
    if not ops:
        return result
    done = action._call({"mode": "apply", "ops": ops}, task_vars)
    if done.get("unreachable"):
        return done
    if done.get("failed"):
        result.update(failed=True, msg=f"{result.get('msg', '')}; writing the commit marks failed: {done.get('msg')}")
    return result


def in_update_os_gate(action, task_vars, serve, verdict):
    """The update-os gate's eval step, once the board passed its other checks: every enabled instance of
    the new image is asked the suite; a score below min_score fails the gate (the rescue rolls the image
    back, its reason naming the score and the worst failure). Returns the module's result when the board
    went away, else None (``verdict`` carries the outcome: ``eval`` and, when it failed, the failures)."""
    gate = gate_of(action, task_vars)
    if gate is None or not verdict.get("ok"):
        return None
    if not serve["instances"]:
        verdict["eval"] = {"kind": "eval", "skipped": "no serving instance enabled on the board (fleet launch)"}
        return None
    suite, min_score = gate
    report = fleet_eval.run(lambda name, margs: action._module(name, margs, task_vars), suite, serve["instances"],
                           serve["token_file"], min_score)
    if report.get("unreachable"):
        return report
    verdict["eval"] = report
    if report["failures"]:
        verdict["ok"] = False
        verdict["failures"] = list(verdict.get("failures") or []) + report["failures"]
        verdict["reason"] = "; ".join(x for x in (verdict.get("reason"), *report["failures"]) if x)
    return None
