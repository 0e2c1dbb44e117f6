"""The update-os health gate's eval step (edge_llm.fleet's eval_action), with a board that answers from a table.

The whole update-os path runs on OSTree virtual boards in tests/ota; here only what the eval step adds to the
gate's verdict: a new image whose model scores below min_score fails the gate (the rescue then rolls the
image back with this reason), one that scores enough passes, and a board without a serving instance is
recorded as skipped, not failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from provisioner.eval.suite import load_suite
from provisioner.fleet.eval import VAR, eval_vars

COLLECTIONS = Path(__file__).resolve().parents[2] / "playbooks" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.edge_llm.fleet.plugins.plugin_utils import eval_action  # noqa: E402

SUITE = load_suite("default")
SERVE = {"instances": [{"model": "nemotron-nano-8b", "unit": "edge-llm-serve@nemotron-nano-8b.service",
                        "port": 8080, "bind": "127.0.0.1"}], "token_file": "/etc/edge-llm/serve/api-token"}


class Board:
    """An action's two calls the eval step uses: its host variables and one module call (answers from ``say``)."""

    def __init__(self, say, min_score=0.8):
        self.vars = eval_vars(SUITE, min_score)
        self.say = say
        self.calls = []

    def _var(self, task_vars, name, default=None):
        return self.vars.get(name, default)

    def _module(self, name, args, task_vars):
        self.calls.append((name, args))
        return {"answers": {"nemotron-nano-8b": {r["id"]: {"status": 200, "content": self.say(r["body"]),
                                                            "tool_calls": []} for r in args["requests"]}},
                "problems": []}


def _right(body):
    ask = body["messages"][-1]["content"]
    for key, answer in (("France", "Paris."), ("Qualcomm", "It makes wireless chips."), ("gravity", "A force."),
                        ("2+3", "5"), ("planet", "Jupiter"), ("Japan", '{"country": "Japan", "capital": "Tokyo"}'),
                        ("7 times 6", "42")):
        if key in ask:
            return answer
    return "I cannot call tools."


def test_a_new_image_whose_model_scores_below_min_score_fails_the_gate_with_score_and_worst_failure():
    board = Board(lambda body: "The capital of alitiesmallalitiesmall")
    verdict = {"ok": True, "failures": [], "reason": ""}
    assert eval_action.in_update_os_gate(board, {}, SERVE, verdict) is None
    assert board.calls and board.calls[0][0] == "edge_llm.fleet.eval"
    assert board.calls[0][1]["token_file"] == SERVE["token_file"] and "token" not in board.calls[0][1]
    assert verdict["ok"] is False
    assert "eval: nemotron-nano-8b scored 0.10 (1/10) below min_score 0.8" in verdict["reason"]   # no_call: right
    assert "worst: capital-france: expected contains 'Paris', got 'The capital of alitiesmall" in verdict["reason"]


def test_a_model_that_keeps_its_score_passes_and_the_score_is_recorded():
    board = Board(_right, min_score=0.6)
    verdict = {"ok": True, "failures": [], "reason": ""}
    eval_action.in_update_os_gate(board, {}, SERVE, verdict)
    assert verdict["ok"] is True, verdict
    assert verdict["eval"]["models"]["nemotron-nano-8b"]["score"] == 0.7      # 7 right; the 3 calls missing


def test_no_serving_instance_is_skipped_and_no_gate_without_min_score():
    board = Board(_right)
    verdict = {"ok": True, "failures": [], "reason": ""}
    eval_action.in_update_os_gate(board, {}, {"instances": [], "token_file": "x"}, verdict)
    assert verdict["ok"] is True and "skipped" in verdict["eval"] and not board.calls
    board.vars = {VAR: {**eval_vars(SUITE, None)[VAR]}}
    verdict = {"ok": True, "failures": [], "reason": ""}
    eval_action.in_update_os_gate(board, {}, SERVE, verdict)
    assert "eval" not in verdict and not board.calls
