"""verify.eval in the release manifest: typed, each mistake one located problem, carried into release.json."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from provisioner.cli.fleet_eval import release_gate
from provisioner.contracts.release_document import FleetPolicy, ReleaseDocument
from provisioner.errors import FleetError, ManifestError
from provisioner.fleet.eval import VAR, from_vars
from provisioner.image.release import release_eval
from provisioner.manifest import load_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nemotron-nano-iq9075.yaml"


def _manifest(tmp_path, verify_eval):
    data = yaml.safe_load(EXAMPLE.read_text())
    for m in data["models"]:                      # keep the example's model paths valid from tmp_path
        m["path"] = str((EXAMPLE.parent / m["path"]).resolve())
    for k, v in (data.get("build") or {}).items():
        if isinstance(v, str) and v.startswith("../"):
            data["build"][k] = str((EXAMPLE.parent / v).resolve())
    data.setdefault("verify", {})["eval"] = verify_eval
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_eval_gate_with_the_default_suite_reaches_release_json_and_the_fleet(tmp_path):
    m = load_manifest(_manifest(tmp_path, {"suite": "default", "min_score": 0.8}))
    assert m.verify.eval is not None and m.verify.eval.min_score == 0.8
    written = release_eval(m)["eval"]
    suite, min_score = from_vars(written)
    assert min_score == 0.8 and suite.name == "edge-llm-default" and len(suite.cases) == len(m.verify.eval.suite.cases)
    ev = release_gate(ReleaseDocument(fleet=FleetPolicy(eval=written)), tmp_path / "release.json")
    assert ev[VAR]["min_score"] == 0.8 and ev[VAR]["suite"]["cases"]
    assert release_gate(ReleaseDocument(fleet=FleetPolicy()), tmp_path / "release.json") == {}


def test_a_suite_beside_the_manifest_is_read_relative_to_it(tmp_path):
    shutil.copy(Path(__file__).resolve().parents[2] / "provisioner/eval/default.yaml", tmp_path / "mine.yaml")
    m = load_manifest(_manifest(tmp_path, {"suite": "mine.yaml", "min_score": 1}))
    assert m.verify.eval.suite.source == str(tmp_path / "mine.yaml")


def test_each_mistake_is_a_located_problem(tmp_path):
    (tmp_path / "bad.yaml").write_text("cases: [{id: a, ask: hi, expect: {number: x}}]\n")
    with pytest.raises(ManifestError) as exc:
        load_manifest(_manifest(tmp_path, {"suite": "bad.yaml", "min_score": 1.5, "floor": 1}))
    text = [str(p) for p in exc.value.problems]
    assert any(t.startswith("verify.eval.min_score: must be a number 0..1, got 1.5") for t in text), text
    assert any(t.startswith("verify.eval.floor: unknown key") for t in text), text
    assert any("verify.eval.suite: " in t and "bad.yaml:cases[0] (a).expect.number: must be a number" in t
               for t in text), text


def test_a_damaged_release_gate_is_one_line(tmp_path):
    with pytest.raises(FleetError, match=r"release.json: fleet.eval: .*min_score must be a number 0..1"):
        release_gate(ReleaseDocument.from_json({"format": 1, "fleet": {"eval": {
            "suite": {"cases": [{"id": "a", "ask": "q", "expect": {"contains": "x"}}]}, "min_score": "high"}}},
            tmp_path / "release.json"), tmp_path / "release.json")


def test_fleet_eval_takes_the_manifests_gate(tmp_path, monkeypatch):
    """`fleet eval --manifest` asks the suite and applies the min score the deploy gate would."""
    from provisioner.cli import main
    from provisioner.fleet.shared import eval_report

    seen = {}

    def fake_run(inventory, suite, min_score, ctx, options=None, **kw):
        seen.update(suite=suite.name, min_score=min_score)
        raise FleetError("stop here", "test")

    monkeypatch.setattr(eval_report, "run_eval", fake_run)
    (tmp_path / "inv.yml").write_text("all: {}\n")
    m = _manifest(tmp_path, {"suite": "default", "min_score": 0.7})
    assert main(["fleet", "eval", "-i", str(tmp_path / "inv.yml"), "--manifest", str(m)]) == 2
    assert seen == {"suite": "edge-llm-default", "min_score": 0.7}
    assert main(["fleet", "eval", "-i", str(tmp_path / "inv.yml"), "--manifest", str(m), "--min-score", "0.2"]) == 2
    assert seen["min_score"] == 0.2
