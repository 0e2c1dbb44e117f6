"""`fleet eval` on virtual boards: the suite through each board's own serving API, scored on the controller.

IQ-9075 boards answer through the Genie stand-in (coherent answers; garbage after its first words with a
wrong soc_model); IQ-8275 boards generate with Google's real LiteRT-LM runtime on a tiny random-weight
model, so their scores are truly low, and that is what the tests expect of them.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import shutil
from pathlib import Path

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.contracts import board as on_board
from provisioner.eval.suite import load_suite
from provisioner.fleet.eval import eval_vars
from provisioner.fleet.runner import FleetOptions, run_fleet
from provisioner.fleet.shared import deploy_index
from provisioner.fleet.shared.eval_report import run_eval
from tests.fleet.artserver import ArtifactServer
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port
from tests.fleet.test_fleet_deploy import GEMMA, NEMO, NEW_QAIRT, _qairt_tarball, add_gemma, add_nemotron

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
        launched = run_fleet("launch", fleet.inventory, context.current(), FleetOptions(log_path=base / "launch.log"))
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
    # an IQ-9075's Genie model is served with its family's tool format: a board that stops offering tools
    # is a regression, not a reason to stop testing the tool-use categories
    assert _capabilities(fleet, "ev-9075").get("tools") is True, "GET /v1/models on ev-9075 says tools: false"
    suite = load_suite("default")
    rep = run_eval(fleet.inventory, suite, None, context.current(), FleetOptions(limit="ev-9075"))
    score = next(s for s in rep.scores if s.board == "ev-9075")
    for cat in ("tool-call", "no-call", "parallel-calls"):
        assert score.categories[cat]["score"] == 1.0, score.failures


def _current(fleet, board: str, model: str) -> str | None:
    link = fleet.rootfs(board) / on_board.model_current(model).lstrip("/")
    return os.readlink(link) if link.is_symlink() else None


def _deploy(fleet, art: Path, server, sub: str, *, limit: str, **more):
    index = deploy_index.build_index(art / sub, f"{server.url}/{sub}")
    ev = {"edge_llm_deploy_index": index, "edge_llm_deploy_serial": "100%",
          "edge_llm_deploy_max_fail_percentage": 100, **eval_vars(load_suite("default"), 0.5), **more}
    return run_fleet("deploy", fleet.inventory, context.current(), FleetOptions(extra_vars=ev, limit=limit))


def test_deploy_keeps_a_model_only_when_its_eval_score_holds(evalfleet):
    """verify.eval's gate on fleet deploy: the Genie model answering right is kept; the tiny random-weight
    model on IQ-8275 (Google's runtime: real words, wrong answers) passes its smoke gate but scores low, and a
    wrong-soc_model Nemotron (garbage after its first words) scores next to nothing: both are rolled back, with
    the score and the worst failure in the reason, and their version is no longer committed."""
    fleet, base = evalfleet
    art = base / "artifacts"
    _qairt_tarball(art / "good" / "qairt" / f"{NEW_QAIRT}.tar.gz", NEW_QAIRT)
    add_nemotron(art / "good", "v2", NEW_QAIRT, part_size=8192)
    gemma_new = add_gemma(art / "good", n_dispatch_ops=3)
    before = {"ev-8275": _current(fleet, "ev-8275", GEMMA)}
    server = ArtifactServer(art)
    try:
        res = _deploy(fleet, art, server, "good", limit="ev-9075,ev-8275")
        assert res.row("ev-9075").verdict == "pass", res.row("ev-9075").reason
        assert _current(fleet, "ev-9075", NEMO) == "v2"
        kept = f"{on_board.model_version_dir(NEMO, 'v2')}{deploy_index.COMMITTED}".lstrip("/")
        assert (fleet.rootfs("ev-9075") / kept).is_file()       # committed once its score held
        low = res.row("ev-8275")
        assert low.verdict == "fail"
        assert f"eval gate failed, {GEMMA} {gemma_new} rolled back to {before['ev-8275']}: eval: {GEMMA} scored" \
            in low.reason and "below min_score 0.5" in low.reason, low.reason
        assert _current(fleet, "ev-8275", GEMMA) == before["ev-8275"]
        mark = f"{on_board.model_version_dir(GEMMA, gemma_new)}{deploy_index.COMMITTED}".lstrip("/")
        assert (fleet.rootfs("ev-8275") / on_board.model_version_dir(GEMMA, gemma_new).lstrip("/")).is_dir()
        assert not (fleet.rootfs("ev-8275") / mark).exists()          # a rerun judges it again

        shutil.copytree(art / "good" / "qairt", art / "soc0" / "qairt")
        add_nemotron(art / "soc0", "v3-soc0", NEW_QAIRT, part_size=8192, soc_model=0)
        # the smoke gate would refuse this garbage first; with it off, the eval gate alone decides
        bad = _deploy(fleet, art, server, "soc0", limit="ev-9075", edge_llm_deploy_health_gate=False)
        row = bad.row("ev-9075")
        assert row.verdict == "fail" and f"eval: {NEMO} scored 0." in row.reason, row.reason
        assert "below min_score 0.5" in row.reason, row.reason
        assert f"{NEMO} v3-soc0 rolled back to v2" in row.reason, row.reason
        assert "worst: " in row.reason and "alitiesmall" in row.reason     # the worst failure, the model's words
        assert _current(fleet, "ev-9075", NEMO) == "v2"
    finally:
        server.close()
