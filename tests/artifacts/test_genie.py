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


# --- configs as the QAIRT SDK writes them (engine lists, CPU/GPU backends, LoRA, embedding LUT) ---
# Shapes follow Genie's validator and SDK example configs (public copy: github.com/kyungraekim/qnn
# @ be158f55, examples/Genie/Genie/src/Dialog.cpp and examples/Genie/configs/).


def _edit(d, change):
    """Rewrite the bundle's genie_config.json through ``change(dialog)``."""
    p = d / "genie_config.json"
    cfg = json.loads(p.read_text())
    change(cfg["dialog"])
    p.write_text(json.dumps(cfg, indent=2))


def _cpu_engine(model_bin="model.bin", role=None):
    e = {"version": 1, "n-threads": 6,
         "backend": {"version": 1, "type": "QnnGenAiTransformer",
                     "QnnGenAiTransformer": {"version": 1, "kv-quantization": False}},
         "model": {"version": 1, "type": "library", "library": {"version": 1, "model-bin": model_bin}}}
    if role:
        e["role"] = role
    return e


def test_kv_share_engine_list_is_read_and_every_engine_checked(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b")

    def kv_share(dialog):
        dialog["type"] = "kv-share"
        dialog["engine"] = [{**dialog["engine"], "role": "primary"}, _cpu_engine(role="secondary")]

    _edit(d, kv_share)
    r = cli("inspect", d, "--json")
    data = r.json()
    assert not any("ctx-bins is empty" in p for p in data["problems"])
    assert r.code == 1 and data["problems"] == [
        "missing model-bin 'model.bin' (named at dialog.engine[1].model.library.model-bin in genie_config.json) "
        "-> copy the whole exported folder; never copy only some parts"]
    (d / "model.bin").write_bytes(b"\1" * 64)
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 0, r.err
    assert "QnnHtp (NPU) + QnnGenAiTransformer (CPU)" in r.out and "kv-share" in r.out
    assert "dialog.engine[1] (secondary) runs on the CPU" in r.out  # a warning, not a refusal


def test_spd_draft_engine_files_are_checked(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", parts=3)

    def spd(dialog):
        target = {**dialog["engine"], "role": "target"}
        draft = json.loads(json.dumps(target))
        draft["role"] = "draft"
        draft["model"]["binary"]["ctx-bins"] = ["draft_part_1_of_2.bin", "draft_part_2_of_2.bin"]
        dialog["type"] = "spd"
        dialog["spd"] = {"version": 1, "draft-len": 7}
        dialog["engine"] = [target, draft]

    _edit(d, spd)
    (d / "draft_part_1_of_2.bin").write_bytes((d / "nemotron_nano_8b_part_1_of_3.bin").read_bytes())
    r = cli("inspect", d, "--json")
    assert r.code == 1
    assert r.json()["problems"] == [
        "missing ctx-bin 'draft_part_2_of_2.bin' (named at dialog.engine[1].model.binary.ctx-bins[1] in "
        "genie_config.json) -> copy the whole exported folder; never copy only some parts"]
    (d / "draft_part_2_of_2.bin").write_bytes((d / "nemotron_nano_8b_part_1_of_3.bin").read_bytes())
    data = cli("inspect", d, "--json").json()
    assert data["problems"] == [] and data["details"]["dialog_type"] == "spd"
    # the draft engine's context binaries are read for their QAIRT build like the target's
    assert {f["name"]: f["qairt_build"] for f in data["details"]["files"]}["draft_part_2_of_2.bin"] == "2.45.0.260326"


def test_cpu_and_gpu_bundles_are_reported_as_such_and_refused_for_the_npu(tmp_path, cli):
    cpu = make_genie_bundle(tmp_path / "cpu", with_ext_config=False)

    def to_cpu(dialog):
        dialog["engine"] = _cpu_engine()

    _edit(cpu, to_cpu)
    (cpu / "model.bin").write_bytes(b"\1" * 64)
    r = cli("inspect", cpu, "--json")
    assert r.code == 0 and r.json()["npu_only"] is False  # nothing wrong with the bundle itself
    assert r.json()["details"]["backend"] == "QnnGenAiTransformer (CPU)"
    r = cli("inspect", cpu, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1 and "QnnGenAiTransformer (CPU): not the NPU" in r.err

    gpu = make_genie_bundle(tmp_path / "gpu", with_ext_config=False)

    def to_gpu(dialog):
        dialog["engine"]["backend"] = {"version": 1, "type": "QnnGpu"}

    _edit(gpu, to_gpu)
    r = cli("inspect", gpu)
    assert r.code == 0 and "QnnGpu (GPU)" in r.out
    r = cli("inspect", gpu, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1 and "QnnGpu (GPU): not the NPU" in r.err


def test_lora_adapters_and_embedding_lut_are_checked(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", parts=2)

    def lora(dialog):
        dialog["embedding"] = {"version": 1, "type": "lut", "lut-path": "embedding_lut.bin", "size": 3072,
                               "datatype": "ufixed8"}
        dialog["engine"]["model"]["binary"]["lora"] = {"version": 1, "alpha-tensor-name": "lora_alpha", "adapters": [
            {"version": 1, "name": "default", "bin-sections": ["default_adapter.bin", ""]},
            {"version": 1, "name": "function", "alphas": ["alpha1"], "bin-sections": ["function_adapter.bin", ""]}]}

    _edit(d, lora)
    (d / "default_adapter.bin").write_bytes(b"\1" * 64)
    data = cli("inspect", d, "--json").json()
    assert data["problems"] == [
        "missing embedding-lut 'embedding_lut.bin' (named at dialog.embedding.lut-path in genie_config.json) "
        "-> copy the whole exported folder; never copy only some parts",
        "missing lora-adapter 'function_adapter.bin' (named at "
        "dialog.engine.model.binary.lora.adapters[1].bin-sections[0] in genie_config.json) "
        "-> copy the whole exported folder; never copy only some parts"]


def test_dialog_facts_are_reported(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", context=2048)
    r = cli("inspect", d)
    assert r.code == 0
    for row in ("dialog type", "basic", "backend", "QnnHtp (NPU)", "n-vocab", "128256",
                "sampler", "seed 42, temp 0.8, top-k 40, top-p 0.95", "context size", "2048"):
        assert row in r.out
    data = cli("inspect", d, "--json").json()
    assert data["details"]["sampler"] == {"seed": 42, "temp": 0.8, "top-k": 40, "top-p": 0.95}
    assert (data["details"]["n_vocab"], data["context_size"]) == (128256, 2048)


def test_qairt_flavour_suffix_normalised_and_pinnable(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "bundle")
    (d / "tool-versions.yaml").write_text("qairt: 2.45.0.260326154327-auto\nonnx: 1.17.0\n")
    r = cli("inspect", d, "--json")
    assert r.code == 0
    data = r.json()
    assert data["qairt_builds"] == ["2.45.0.260326"] and data["details"]["qairt_flavour"] == "auto"
    assert "2.45.0.260326 (flavour auto)" in cli("inspect", d).out
    # check suggests what the manifest accepts: pinning the suggestion makes the manifest pass
    m = tmp_path / "genie.yaml"
    text = """release: nemo-r1
board: iq-9075-evk
qairt: ['{q}']
models:
  - {{name: nemotron, kind: genie, path: bundle, qairt: '{q}'}}
"""
    m.write_text(text.format(q="2.44.0.260225"))
    r = cli("check", m)
    assert r.code == 1 and "set models[0].qairt: 2.45.0.260326 " in r.err + r.out
    m.write_text(text.format(q="2.45.0.260326"))
    assert cli("check", m).code == 0


def _no_access_outside(monkeypatch, bundle):
    """Record every stat/lstat/open of a path outside ``bundle`` (the reader must make none)."""
    import builtins
    import os

    root = str(bundle.resolve())
    outside: list[str] = []

    def guard(fn):
        def wrapped(p, *a, **kw):
            if isinstance(p, (str, os.PathLike)):
                full = os.path.abspath(os.fspath(p))
                inside = full == root or full.startswith(root + os.sep)
                above = root.startswith(full.rstrip(os.sep) + os.sep)  # resolving the bundle's own path
                if not (inside or above) and "site-packages" not in full and "/provisioner/" not in full:
                    outside.append(full)
            return fn(p, *a, **kw)
        return wrapped

    for name in ("stat", "lstat", "open"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    monkeypatch.setattr(builtins, "open", guard(builtins.open))
    return outside


def test_names_leaving_the_bundle_are_refused_and_never_read(tmp_path, cli, monkeypatch):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"v2.44.0.260225999999 secret")
    d = make_genie_bundle(tmp_path / "outer" / "b", parts=3)
    (d / "link.bin").symlink_to(secret)
    (d / "stray.bin").symlink_to(secret)  # not named by the config: listed as a warning, not read

    def escape(dialog):
        dialog["engine"]["model"]["binary"]["ctx-bins"] = [
            "nemotron_nano_8b_part_1_of_3.bin", "../../secret.bin", str(secret), "link.bin"]

    _edit(d, escape)
    for f in ("nemotron_nano_8b_part_2_of_3.bin", "nemotron_nano_8b_part_3_of_3.bin"):
        (d / f).unlink()
    outside = _no_access_outside(monkeypatch, d)
    r = cli("inspect", d, "--json", "--hash")
    assert outside == []
    assert r.code == 1
    data = r.json()
    escaped = [p for p in data["problems"] if "points outside the bundle" in p]
    assert [p.split(" '")[0] for p in escaped] == [
        f"genie_config.json: dialog.engine.model.binary.ctx-bins[{i}]" for i in (1, 2, 3)]
    assert "secret.bin" not in json.dumps(data["sha256"]) and "stray.bin" not in data["sha256"]
    assert any("'stray.bin' is a symlink out of the bundle" in w for w in data["warnings"])
    assert data["qairt_builds"] == ["2.45.0.260326"]  # the secret's build id was never read
    r = cli("inspect", d)
    assert r.code == 1 and len(r.err_lines) == 1 and "points outside the bundle" in r.err


def test_symlink_inside_the_bundle_is_fine(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", parts=2)
    (d / "sub").mkdir()
    (d / "nemotron_nano_8b_part_2_of_2.bin").rename(d / "sub" / "p2.bin")
    (d / "nemotron_nano_8b_part_2_of_2.bin").symlink_to("sub/../sub/p2.bin")
    assert cli("inspect", d, "--board", "iq-9075-evk").code == 0


def test_tool_versions_alias_bomb_is_refused_in_one_line(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", parts=2)
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]"
              for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    (d / "tool-versions.yaml").write_text("\n".join(lines) + "\nqairt: *i\n")
    r = cli("inspect", d)
    assert r.code == 2 and len(r.err_lines) == 1
    assert "tool-versions.yaml" in r.err and "line 1" in r.err and "anchor" in r.err


def test_unfilled_ext_template_is_named(tmp_path, cli):
    d = make_genie_bundle(tmp_path / "b", parts=2)
    (d / "htp_backend_ext_config.json").write_text('{"devices": [{"soc_model": <TODO>, "dsp_arch": "<TODO>"}]}')
    r = cli("inspect", d)
    assert r.code == 1 and len(r.err_lines) == 1 and "<TODO>" in r.err and "soc_model" in r.err
