"""The controller's deploy/rollback rules (provisioner.fleet.deploy_steps) without a board.

What an ops team reads in the report after a failed gate, and what the board is told to do: a
version that failed its gate is never committed and never stays `current`; with nothing to fall
back to, `current` goes and the service stops.
"""

from __future__ import annotations

import json

from provisioner.fleet import deploy_index, deploy_steps

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
    return {GEMMA: deploy_steps.gate_expect(BOARD, {}, MODELS, None, GEMMA, "2.45.0.260326")}


FAILED_RUN = {"rc": 1, "stdout": "", "stderr": "ERROR: TF_LITE_PREFILL_DECODE not found", "collected": {}}


def _ops(steps: deploy_steps.Steps) -> list[tuple[str, str]]:
    return [(o["op"], o.get("target") or o.get("unit") or "") for o in steps.ops]


def test_failed_gate_on_current_rolls_back_to_previous():
    inst = _install()
    found = {GEMMA: {"installed": True, "committed": False, "old": "v2", "old_previous": "v1", "run": FAILED_RUN}}
    steps = deploy_steps.deploy_steps(inst, found, _expects(), health_gate=True, prune=True)
    assert _ops(steps) == [("link", "v1")]                          # no commit mark, current back to v1
    assert steps.failures[0].startswith(f"health gate failed: {GEMMA} v2 not committed, current rolled back to v1 (")


def test_failed_gate_with_nothing_to_fall_back_to_removes_current_and_stops_the_service():
    inst = _install()
    found = {GEMMA: {"installed": False, "committed": False, "old": "", "old_previous": "", "run": FAILED_RUN}}
    steps = deploy_steps.deploy_steps(inst, found, _expects(), health_gate=True, prune=True)
    unit = f"edge-llm-serve@{GEMMA}.service"
    assert _ops(steps) == [("unlink", ""), ("stop", unit)]
    assert f"no version to fall back to: current removed, {unit} stopped (" in steps.failures[0]


def test_a_new_version_is_committed_before_current_switches_and_old_versions_are_pruned():
    inst = _install()
    found = {GEMMA: {"installed": False, "committed": False, "old": "v1", "old_previous": "v0",
                     "run": {"rc": 0, "stdout": "An NPU is a processor. It runs neural networks fast.", "stderr": "",
                             "collected": {}}}}
    steps = deploy_steps.deploy_steps(inst, found, _expects(), health_gate=False, prune=True)
    assert [o["op"] for o in steps.ops] == ["write", "link", "link", "prune"]
    mark = json.loads(steps.ops[0]["content"])
    assert steps.ops[0]["path"].endswith("/v2" + deploy_index.COMMITTED) and mark["gated"] is False
    assert _ops(steps)[1:3] == [("link", "v1"), ("link", "v2")]      # previous, then current
    assert steps.ops[3]["keep"] == ["v2", "v1"] and not steps.failures


def test_an_up_to_date_board_gets_no_second_call():
    found = {GEMMA: {"installed": True, "committed": True, "old": "v2", "old_previous": "v1"}}
    steps = deploy_steps.deploy_steps(_install(), found, _expects(), health_gate=True, prune=True)
    assert steps.ops == [] and steps.failures == []


def test_rollback_without_previous_and_with_a_failed_gate_leaves_current_alone():
    expects = {GEMMA: deploy_steps.gate_expect(BOARD, {}, MODELS, None, GEMMA)}
    none = deploy_steps.rollback_steps(MODELS, {GEMMA: {"current": "v2", "previous": ""}}, expects, health_gate=True)
    assert none.ops == [] and none.failures == [f"{GEMMA} has no previous version on this board -> deploy one first"]
    bad = deploy_steps.rollback_steps(MODELS, {GEMMA: {"current": "v2", "previous": "v1", "run": FAILED_RUN}},
                                      expects, health_gate=True)
    assert bad.ops == []
    assert bad.failures[0].startswith(f"health gate failed: {GEMMA} v1 not rolled back to, current stays on v2 (")
