"""`fleet eval` on virtual boards: the suite through each board's own serving API, scored on the controller.

IQ-9075 boards answer through the Genie stand-in (coherent answers; garbage after its first words with a
wrong soc_model); IQ-8275 boards generate with Google's real LiteRT-LM runtime on a tiny random-weight
model, so their scores are truly low, and that is what the tests expect of them.
"""

from __future__ import annotations

import csv
import http.client
import json

import pytest

from provisioner.cli import main
from provisioner.eval.suite import load_suite
from provisioner.fleet.api import run_fleet
from provisioner.fleet.eval_report import run_eval
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]

GOLDEN = ("knowledge", "arithmetic", "format")


@pytest.fixture(scope="module")
def evalfleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-eval")
    specs = [BoardSpec("ev-9075", "iq-9075-evk", vars={"edge_llm_serve_port_base": free_port()}),
             BoardSpec("ev-9075-soc", "iq-9075-evk", faults=("wrong-soc-model",),
                       vars={"edge_llm_serve_port_base": free_port()}),
             BoardSpec("ev-8275", "iq-8275-evk", vars={"edge_llm_serve_port_base": free_port()})]
    fleet = build_fleet(base / "sim", specs, cache=base / "cache", base_index=700)
    try:
        launched = run_fleet("launch", fleet.inventory, log_path=base / "launch.log")
        assert all(r.verdict == "pass" for r in launched.rows), [(r.board, r.reason) for r in launched.rows]
        yield fleet, base
    finally:
        fleet.stop()


def test_eval_scores_each_board_and_names_the_worst_failures_with_the_models_words(evalfleet, tmp_path, capsys):
    fleet, _ = evalfleet
    report = tmp_path / "out" / "fleet.json"
    report.parent.mkdir()
    code = main(["fleet", "eval", "-i", str(fleet.inventory), "--report", str(report), "--min-score", "0.5"])
    out = capsys.readouterr().out
    assert code == 1                                   # the garbage board and the tiny random model fail
    data = json.loads((tmp_path / "out" / "fleet.eval.json").read_text())
    boards = {b["board"]: b for b in data["boards"]}
    healthy = boards["ev-9075"]["models"]["nemotron-nano-8b"]
    for cat in GOLDEN:
        assert healthy["categories"][cat]["score"] == 1.0, healthy["failures"]
    assert boards["ev-9075"]["verdict"] == "pass"
    garbage = boards["ev-9075-soc"]["models"]["nemotron-nano-8b"]
    assert all(garbage["categories"][c]["passed"] == 0 for c in GOLDEN), garbage
    assert boards["ev-9075-soc"]["verdict"] == "fail"
    assert "scored" in boards["ev-9075-soc"]["reason"] and "below min_score 0.5" in boards["ev-9075-soc"]["reason"]
    assert any("alitiesmall" in f["got"] for f in garbage["failures"])
    tiny = boards["ev-8275"]["models"]["gemma-4-e2b"]
    assert tiny["score"] < 0.5 and boards["ev-8275"]["verdict"] == "fail"
    # the terminal names the worst failures with what the models said
    assert "worst failures" in out and "alitiesmall" in out
    rows = list(csv.DictReader((tmp_path / "out" / "fleet.eval.csv").open()))
    assert {r["board"] for r in rows} == {"ev-9075", "ev-9075-soc", "ev-8275"}
    assert set(data["categories"]) <= set(rows[0])
    assert json.loads(report.read_text())["action"] == "eval"


def _capabilities(fleet, board: str) -> dict:
    """What the board's service says its model supports (GET /v1/models, with the board's token)."""
    port = fleet.specs[board].vars["edge_llm_serve_port_base"]
    token = (fleet.inventory.parent / ".edge-llm-tokens" / board).read_text().strip()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {token}"})
        return json.loads(conn.getresponse().read())["data"][0].get("capabilities") or {}
    finally:
        conn.close()


def test_tool_use_through_the_openai_contract(evalfleet):
    """The tool categories: the right call, its arguments, none when not needed, parallel calls, asked
    through the OpenAI tool-call contract (the Genie stand-in answers tool prompts in the family's format)."""
    fleet, _ = evalfleet
    if not _capabilities(fleet, "ev-9075").get("tools"):
        pytest.skip("the board's service does not offer tools for its model yet (GET /v1/models: tools false)")
    suite = load_suite("default")
    rep = run_eval(fleet.inventory, suite, None, limit="ev-9075")
    score = next(s for s in rep.scores if s.board == "ev-9075")
    for cat in ("tool-call", "no-call", "parallel-calls"):
        assert score.categories[cat]["score"] == 1.0, score.failures
