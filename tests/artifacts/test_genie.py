"""`provisioner inspect` on Genie bundle folders (AI Hub export layout)."""

from __future__ import annotations

import hashlib
import json

from provisioner.artifacts.inspect import inspect_path
from provisioner.catalog import board
from provisioner.sim.synthetic_models import make_genie_bundle


def test_good_bundle_runs_on_iq9075(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "nemotron-genie-w4a16-qualcomm_qcs9075")
    ins = inspect_path(d, board("iq-9075-evk"))
    assert ins.kind == "genie" and ins.problems == []
    # tool-versions.yaml says 2.45.0.260326154327; the runtime needs the 6-digit build
    assert ins.qairt_builds == ["2.45.0.260326"]
    assert (ins.soc_model, ins.dsp_arch, ins.context_size) == (77, "v73", 4096)
    assert ins.size == sum(p.stat().st_size for p in d.iterdir())
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 0 and "can run on iq-9075-evk" in r.out


def test_generic_soc_model_refused_with_diagnosis(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", soc_model=0)
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1
    assert "soc_model 0" in r.err and "garbage" in r.err
    # refused even without a board: it cannot be right anywhere
    assert cli("inspect", d).code == 1


def test_bundle_for_other_soc(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", soc_model=82, dsp_arch="v75")
    r = cli("inspect", d, "--board", "iq-9075-evk", "--json")
    assert r.code == 1
    data = r.json()
    assert data["can_run"] is False and data["soc_model"] == 82
    assert any("needs soc_model 77" in p for p in data["problems"])
    assert any("v73" in p for p in data["problems"])
    # the same bundle is fine on the board it was compiled for
    assert cli("inspect", d, "--board", "iq-8275-evk").code == 0


def test_missing_part(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", missing=[3])
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1
    assert "part_3_of_5.bin" in r.err and "whole exported folder" in r.err


def test_missing_ext_config(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", with_ext_config=False)
    r = cli("inspect", d, "--json")
    assert r.code == 1
    data = r.json()
    assert data["soc_model"] is None
    assert len(data["problems"]) == 1 and "htp_backend_ext_config.json" in data["problems"][0]


def test_not_a_bundle(tmp_path, cli):
    (tmp_path / "x.bin").write_bytes(b"\0" * 10)
    r = cli("inspect", tmp_path)
    assert r.code == 2 and "not a Genie bundle" in r.err and len(r.err_lines) == 1


def test_perf_profile_warning_and_hashes(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", perf_profile="balanced", parts=3)
    r = cli("inspect", d, "--hash", "--json")
    assert r.code == 0
    data = r.json()
    assert any("burst" in w for w in data["warnings"])
    assert data["sha256"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}
    cfg = json.loads((d / "genie_config.json").read_text())
    assert len(cfg["dialog"]["engine"]["model"]["binary"]["ctx-bins"]) == 3
