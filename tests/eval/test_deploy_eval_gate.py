"""The deploy eval gate's decisions (edge_llm.fleet's eval_action.after_deploy) with a board that answers from a
table: kept when the score holds, rolled back through the deploy action's rollback mode when there is a version
before, and on a first install taken off entirely (current removed, instance stopped) as the smoke gate does.
The whole path runs on virtual boards in tests/fleet/test_fleet_eval.py; this covers the first-install branch."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from provisioner.contracts.inventory import HostVars
from provisioner.eval.suite import load_suite
from provisioner.fleet.eval import eval_vars

COLLECTIONS = Path(__file__).resolve().parents[2] / "playbooks" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.edge_llm.fleet.plugins.plugin_utils import eval_action  # noqa: E402

from tests.eval.test_update_os_eval_gate import _right as right  # noqa: E402  (7 of the 10 answers right)

SUITE = load_suite("default")
MODEL = {"name": "nemotron-nano-8b", "kind": "genie", "qairt": "2.45.0.260326", "file": "x"}


class Board:
    def __init__(self, say):
        self.vars = eval_vars(SUITE, 0.5)
        self.say = say
        self.calls = []

    def _var(self, task_vars, name, default=None):
        return self.vars.get(name, default)

    def _module(self, name, args, task_vars):
        self.calls.append(("module", name))
        return {"answers": {"nemotron-nano-8b": {r["id"]: {"status": 200, "content": self.say(r["body"])}
                                                 for r in args["requests"]}}, "problems": []}

    def _run(self, result, task_vars, mode, install, models, expects, gate, prune, serve):
        self.calls.append(("run", mode, [m["name"] for m in models]))
        return {"edge_llm": {"kind": "rollback", "ok": True}}

    def _call(self, args, task_vars):
        self.calls.append(("apply", [(o["op"], o.get("path") or o.get("unit")) for o in args["ops"]]))
        return {"changed": True, "done": []}


def _deployed(frm):
    return {"msg": "nemotron-nano-8b current v2", "edge_llm": {
        "kind": "deploy", "ok": True,
        "models": {"nemotron-nano-8b": {"version": "v2", "from": frm, "outcome": "current v2"}},
        "done": [{"op": "restart", "model": "nemotron-nano-8b", "health": None}]}}


def _serve():
    expect = HostVars.from_vars({"edge_llm_board": "iq-9075-evk", "edge_llm_board_facts": {},
                                 "edge_llm_models": [MODEL]})
    return SimpleNamespace(expect=expect, bind="127.0.0.1", port_base=8080)


def test_a_first_install_that_fails_the_eval_gate_is_taken_off_and_its_instance_stopped():
    board = Board(lambda body: "alitiesmall")
    res = eval_action.after_deploy(board, _deployed(None), {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert res["failed"] and "no version to fall back to, current removed" in res["msg"], res["msg"]
    assert "eval: nemotron-nano-8b scored" in res["msg"]
    assert not any(c[0] == "run" for c in board.calls)
    ops = next(c[1] for c in board.calls if c[0] == "apply")
    assert any(op == "unlink" and path.endswith("/nemotron-nano-8b/v2.committed") for op, path in ops)
    assert any(op == "unlink" and path.endswith("/current") for op, path in ops)
    assert any(op == "stop" and "nemotron-nano-8b" in unit for op, unit in ops)


def test_with_a_version_before_it_the_rollback_mode_runs_and_a_good_score_keeps_the_model():
    board = Board(lambda body: "alitiesmall")
    res = eval_action.after_deploy(board, _deployed("v1"), {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert res["failed"] and "nemotron-nano-8b v2 rolled back to v1" in res["msg"]
    assert ("run", "rollback", ["nemotron-nano-8b"]) in board.calls
    kept = Board(right)
    res = eval_action.after_deploy(kept, _deployed("v1"), {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert not res.get("failed") and "; eval nemotron-nano-8b" in res["msg"]
    assert [c[0] for c in kept.calls] == ["module"]


def _held(frm):
    res = _deployed(frm)
    res["edge_llm"]["models"]["nemotron-nano-8b"]["commit_op"] = {
        "op": "write", "path": "/var/lib/edge-llm/models/nemotron-nano-8b/v2.committed", "content": "{}\n"}
    return res


def test_the_commit_mark_is_written_only_once_the_score_holds():
    kept = Board(right)
    res = eval_action.after_deploy(kept, _held("v1"), {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert not res.get("failed") and [c[0] for c in kept.calls] == ["module", "apply"]
    assert kept.calls[1][1] == [("write", "/var/lib/edge-llm/models/nemotron-nano-8b/v2.committed")]
    assert "commit_op" not in str(res["edge_llm"])           # the mark's content stays out of the report
    failed = Board(lambda body: "alitiesmall")
    res = eval_action.after_deploy(failed, _held("v1"), {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert res["failed"] and not any(op == "write" for c in failed.calls if c[0] == "apply" for op, _ in c[1])


def test_a_board_lost_mid_eval_leaves_the_version_uncommitted_for_the_next_run():
    class Lost(Board):
        def _module(self, name, args, task_vars):
            self.calls.append(("module", name))
            return {"unreachable": True, "msg": "ssh: connection refused"}

    lost = Lost(right)
    res = eval_action.after_deploy(lost, _held("v1"), {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert res.get("unreachable") and [c[0] for c in lost.calls] == ["module"]     # no mark written
    # the next run: current v2 still uncommitted, not restarted by this run, reported from v1: judged now
    again = _held("v1")
    again["edge_llm"]["done"] = []
    kept = Board(right)
    res = eval_action.after_deploy(kept, again, {}, [MODEL], {"board": "iq-9075-evk"}, True, _serve())
    assert [c[0] for c in kept.calls] == ["module", "apply"] and "; eval nemotron-nano-8b" in res["msg"]
