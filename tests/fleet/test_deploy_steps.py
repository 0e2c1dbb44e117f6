"""The controller's deploy/rollback rules (provisioner.fleet.deploy, provisioner.fleet.rollback) without a board.

What an ops team reads in the report after a failed gate, and what the board is told to do: a
version that failed its gate is never committed and never stays `current`; with nothing to fall
back to, `current` goes and the service stops.
"""

from __future__ import annotations

import json

from provisioner.fleet import deploy, rollback
from provisioner.fleet.shared import deploy_index, version_switch

GEMMA = "gemma-4-e2b"
BOARD = "iq-8275-evk"
MODELS = [{"name": GEMMA, "kind": "litertlm", "runtime": "litert_lm", "qairt": "2.45.0.260326"}]


def _install(version: str = "v2") -> dict:
    index = {"base_url": "http://art", "qairt": [], "runtimes": [],
             "models": [{"name": GEMMA, "version": version, "kind": "litertlm", "runtime": "litert_lm",
                         "qairt": "2.45.0.260326", "size": 3, "sha256": "a" * 64, "file": "m.litertlm",
                         "files": [{"name": "m.litertlm", "url": "http://art/m", "sha256": "a" * 64, "size": 3}]}]}
    return deploy_index.board_install(index, MODELS, BOARD)


def _expects() -> dict:
    return {GEMMA: version_switch.gate_expect(BOARD, {}, MODELS, None, GEMMA, "2.45.0.260326")}


FAILED_RUN = {"rc": 1, "stdout": "", "stderr": "ERROR: TF_LITE_PREFILL_DECODE not found", "collected": {}}


def _ops(steps: version_switch.Steps) -> list[tuple[str, str]]:
    return [(o["op"], o.get("target") or o.get("unit") or "") for o in steps.ops]


def test_failed_gate_on_current_rolls_back_to_previous():
    inst = _install()
    found = {GEMMA: {"installed": True, "committed": False, "old": "v2", "old_previous": "v1", "run": FAILED_RUN}}
    steps = deploy.deploy_steps(inst, found, _expects(), health_gate=True, prune=True)
    assert _ops(steps) == [("link", "v1")]                          # no commit mark, current back to v1
    assert steps.failures[0].startswith(f"health gate failed: {GEMMA} v2 not committed, current rolled back to v1 (")


def test_failed_gate_with_nothing_to_fall_back_to_removes_current_and_stops_the_service():
    inst = _install()
    found = {GEMMA: {"installed": False, "committed": False, "old": "", "old_previous": "", "run": FAILED_RUN}}
    steps = deploy.deploy_steps(inst, found, _expects(), health_gate=True, prune=True)
    unit = f"edge-llm-serve@{GEMMA}.service"
    assert _ops(steps) == [("unlink", ""), ("stop", unit)]
    assert f"no version to fall back to: current removed, {unit} stopped (" in steps.failures[0]


def test_a_new_version_is_committed_before_current_switches_and_old_versions_are_pruned():
    inst = _install()
    found = {GEMMA: {"installed": False, "committed": False, "old": "v1", "old_previous": "v0",
                     "run": {"rc": 0, "stdout": "An NPU is a processor. It runs neural networks fast.", "stderr": "",
                             "collected": {}}}}
    steps = deploy.deploy_steps(inst, found, _expects(), health_gate=False, prune=True)
    assert [o["op"] for o in steps.ops] == ["write", "link", "link", "prune"]
    mark = json.loads(steps.ops[0]["content"])
    assert steps.ops[0]["path"].endswith("/v2" + deploy_index.COMMITTED) and mark["gated"] is False
    assert _ops(steps)[1:3] == [("link", "v1"), ("link", "v2")]      # previous, then current
    assert steps.ops[3]["keep"] == ["v2", "v1"] and not steps.failures


def test_an_up_to_date_board_gets_no_second_call():
    found = {GEMMA: {"installed": True, "committed": True, "old": "v2", "old_previous": "v1"}}
    steps = deploy.deploy_steps(_install(), found, _expects(), health_gate=True, prune=True)
    assert steps.ops == [] and steps.failures == []


def test_rollback_without_previous_and_with_a_failed_gate_leaves_current_alone():
    expects = {GEMMA: version_switch.gate_expect(BOARD, {}, MODELS, None, GEMMA)}
    none = rollback.rollback_steps(MODELS, {GEMMA: {"current": "v2", "previous": ""}}, expects, health_gate=True)
    assert none.ops == [] and none.failures == [f"{GEMMA} has no previous version on this board -> deploy one first"]
    bad = rollback.rollback_steps(MODELS, {GEMMA: {"current": "v2", "previous": "v1", "run": FAILED_RUN}},
                                      expects, health_gate=True)
    assert bad.ops == []
    assert bad.failures[0].startswith(f"health gate failed: {GEMMA} v1 not rolled back to, current stays on v2 (")


# -- the launched instance after a switch: edge-llm-serve loads its model once, at start -----------------------
OLD_Q, NEW_Q = "2.45.0.260326", "2.45.0.260401"
OK_RUN = {"rc": 0, "stdout": "An NPU is a processor. It runs neural networks fast.", "stderr": "", "collected": {}}


def _serve(qairt: str = OLD_Q) -> version_switch.Serve:
    models = [dict(MODELS[0], qairt=qairt)]
    return version_switch.Serve(version_switch.serve_expect(BOARD, {}, models), port_base=9100)


def _launched(qairt: str) -> dict:
    """The instance files `fleet launch` wrote for ``qairt`` (what call 1 reads back from the board)."""
    inst = version_switch.launch_instance(_serve(), GEMMA, qairt)
    from provisioner.fleet import launch
    return {"config": launch.config_text(inst["config"]), "dropin": inst["dropin"]}


def _index_install(version: str, qairt: str) -> dict:
    inst = _install(version)
    for m in inst["models"]:
        m["qairt"] = m["meta"]["qairt"] = qairt
    return inst


def test_a_switch_on_a_launched_board_rewrites_the_instance_for_the_new_qairt_and_restarts_it():
    inst = _index_install("v2", NEW_Q)
    found = {GEMMA: {"installed": False, "committed": False, "old": "v1", "old_previous": "", "run": OK_RUN,
                     "instance": _launched(OLD_Q), "qairt": {"v1": OLD_Q}}}
    steps = deploy.deploy_steps(inst, found, _expects(), health_gate=False, prune=False, serve=_serve())
    ops = [o["op"] for o in steps.ops]
    assert ops == ["write", "link", "link", "write", "write", "restart"], ops
    config = json.loads(steps.ops[3]["content"])
    assert steps.ops[3]["path"] == f"/etc/edge-llm/serve/{GEMMA}.json" and config["port"] == 9100
    assert f"/opt/qairt/{NEW_Q}/" in config["env"]["LD_LIBRARY_PATH"] and OLD_Q not in json.dumps(config)
    assert f"/opt/qairt/{NEW_Q}/" in steps.ops[4]["content"]                     # the drop-in too
    restart = steps.ops[5]
    assert restart["unit"] == f"edge-llm-serve@{GEMMA}.service" and restart["daemon_reload"]
    assert restart["instance"]["health_url"] == "http://127.0.0.1:9100/health"


def test_a_restart_after_a_switch_keeps_the_port_the_board_was_launched_on():
    """`fleet launch` ran with other port settings than this deploy's inventory (port 25850, not 9100): the
    rewritten config and the /health wait stay where the board's clients reach the service."""
    inst = _index_install("v2", NEW_Q)
    launched = _launched(OLD_Q)
    launched["config"] = launched["config"].replace('"port": 9100', '"port": 25850')
    found = {GEMMA: {"installed": False, "committed": False, "old": "v1", "old_previous": "", "run": OK_RUN,
                     "instance": launched, "qairt": {"v1": OLD_Q}}}
    steps = deploy.deploy_steps(inst, found, _expects(), health_gate=False, prune=False, serve=_serve())
    config = next(json.loads(o["content"]) for o in steps.ops if o["op"] == "write" and o["path"].endswith(".json"))
    restart = next(o for o in steps.ops if o["op"] == "restart")
    assert config["port"] == 25850 and restart["instance"]["health_url"] == "http://127.0.0.1:25850/health"


def test_a_switch_on_a_board_without_the_instance_restarts_nothing_and_an_up_to_date_instance_gets_no_call():
    inst = _index_install("v2", NEW_Q)
    found = {GEMMA: {"installed": False, "committed": False, "old": "v1", "old_previous": "", "run": OK_RUN,
                     "instance": None}}
    steps = deploy.deploy_steps(inst, found, _expects(), health_gate=False, prune=False, serve=_serve())
    assert [o["op"] for o in steps.ops] == ["write", "link", "link"]
    done = {GEMMA: {"installed": True, "committed": True, "old": "v2", "old_previous": "v1",
                    "instance": _launched(NEW_Q)}}
    assert deploy.deploy_steps(inst, done, _expects(), health_gate=True, prune=True, serve=_serve()).ops == []
    # a run that died between the switch and the restart: the rerun rewrites the stale config and restarts
    stale = {GEMMA: dict(done[GEMMA], instance=_launched(OLD_Q))}
    rerun = deploy.deploy_steps(inst, stale, _expects(), health_gate=True, prune=True, serve=_serve())
    assert [o["op"] for o in rerun.ops] == ["write", "write", "restart"]


def test_rollback_gates_and_serves_previous_on_its_own_qairt():
    serve = _serve(NEW_Q)                                     # the inventory still says what deploy brought
    expects = {GEMMA: version_switch.gate_expect(BOARD, {}, MODELS, None, GEMMA, NEW_Q)}
    args = rollback.rollback_args(MODELS, expects, health_gate=True, serve=serve)
    run = json.dumps(args["runs"][GEMMA])
    assert rollback.QAIRT_SLOT in run and NEW_Q not in run   # the board fills in previous's model.json QAIRT
    assert args["models"][0]["default_qairt"] == NEW_Q
    found = {GEMMA: {"current": "v2", "previous": "v1", "run": OK_RUN, "qairt": {"v1": OLD_Q, "v2": NEW_Q},
                     "instance": _launched(NEW_Q)}}
    steps = rollback.rollback_steps(MODELS, found, expects, health_gate=False, serve=serve)
    writes = [o for o in steps.ops if o["op"] == "write" and o["path"].endswith(".json") and "serve" in o["path"]]
    assert len(writes) == 1 and f"/opt/qairt/{OLD_Q}/" in json.loads(writes[0]["content"])["env"]["LD_LIBRARY_PATH"]
    assert steps.ops[-1]["op"] == "restart"


def test_an_instance_that_does_not_come_back_is_reported_with_its_unit_and_health_url():
    done = [{"op": "restart", "path": f"edge-llm-serve@{GEMMA}.service", "changed": True, "health": "HTTP 503",
             "model": GEMMA, "version": "v2", "health_url": "http://127.0.0.1:9100/health"}]
    assert version_switch.restart_failures(done, 30) == [
        f"service failed after the switch: edge-llm-serve@{GEMMA}.service restarted onto {GEMMA} v2, "
        "GET http://127.0.0.1:9100/health did not answer 200 after 30 attempts (HTTP 503)"]


def test_with_an_eval_gate_the_commit_mark_waits_for_the_score():
    """hold_commit (a release with verify.eval): the switch happens, the mark is left for the eval gate; a
    version left current but uncommitted by a run that lost the board is judged again, from the one before."""
    ok = {"rc": 0, "stdout": "An NPU is a processor. It runs neural networks fast.", "stderr": "", "collected": {}}
    found = {GEMMA: {"installed": False, "committed": False, "old": "v1", "old_previous": "v0", "run": ok}}
    steps = deploy.deploy_steps(_install(), found, _expects(), health_gate=False, prune=True, hold_commit=True)
    assert not any(o["op"] == "write" and o["path"].endswith(".committed") for o in steps.ops)
    assert ("link", "v2") in _ops(steps)
    row = steps.models[GEMMA]
    assert row["commit_op"]["path"].endswith("/v2.committed") and row["from"] == "v1"
    found = {GEMMA: {"installed": True, "committed": False, "old": "v2", "old_previous": "v1", "run": ok}}
    again = deploy.deploy_steps(_install(), found, _expects(), health_gate=False, prune=True, hold_commit=True)
    assert again.models[GEMMA]["from"] == "v1" and "commit_op" in again.models[GEMMA]
    assert again.models[GEMMA]["outcome"] == "current v2"
