"""`provisioner inspect` / `check` on Genie bundles built around Qualcomm's own configs.

The configs and the HTP extension template are ai-hub-apps v0.20.0
``tutorials/llm_on_genie/configs/`` (``../shared/realworld/genie/ai-hub-apps-v0.20.0``). The bundle
is assembled the way that tutorial's ``manual_bundle.md`` says: the model's config copied to
``genie_config.json``, the template copied to ``htp_backend_ext_config.json`` with ``soc_model`` and
``dsp_arch`` edited for the target, the tokenizer and the ``<model>_part_i_of_N.bin`` context
binaries next to them. Context binaries and tokenizer are small stand-ins (the reader only looks
at the first KiB of each). Multi-engine and CPU/GPU variants are derived from the real engine
object in the shapes of the QAIRT SDK example configs (public copy: github.com/kyungraekim/qnn @
be158f55, ``examples/Genie/configs/llama2-7b/llama2-7b-genaitransformer-htp-kv-share.json``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from provisioner.catalog import board
from provisioner.sim.synthetic_models import fake_context_binary

CONFIGS = ("llama_v3_1_8b_instruct.json", "llama_v3_2_3b_instruct.json")
TEMPLATE = "htp_backend_ext_config.json.template"
TOOL_VERSIONS = "qairt: 2.45.0.260326154327-auto\nonnx: 1.17.0\nai_hub_models: 0.30.0\n"


def _genie_dir(realworld: Path) -> Path:
    return realworld / "genie" / "ai-hub-apps-v0.20.0"


def _ctx_bins(engine: dict) -> list[str]:
    return engine["model"]["binary"]["ctx-bins"]


def make_bundle(realworld: Path, out: Path, config: str, *, board_id: str = "iq-9075-evk",
                change=None, fill_template: bool = True) -> Path:
    """A Genie bundle folder around a real ai-hub-apps config; ``change(dialog)`` edits the config."""
    src = _genie_dir(realworld)
    out.mkdir(parents=True)
    cfg = json.loads((src / config).read_text())
    if change:
        change(cfg["dialog"])
    (out / "genie_config.json").write_text(json.dumps(cfg, indent=4))
    template = (src / TEMPLATE).read_text()
    if fill_template:  # manual_bundle.md: "Edit soc_model and dsp_arch ... depending on your target device"
        b = board(board_id)
        assert '"soc_model": <TODO>' in template and '"dsp_arch": "<TODO>"' in template
        template = template.replace('"soc_model": <TODO>', f'"soc_model": {b.qnn_soc_model}')
        template = template.replace('"dsp_arch": "<TODO>"', f'"dsp_arch": "{b.hexagon_arch}"')
    (out / "htp_backend_ext_config.json").write_text(template)
    (out / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": {}}}')
    (out / "tool-versions.yaml").write_text(TOOL_VERSIONS)
    engines = cfg["dialog"]["engine"] if isinstance(cfg["dialog"]["engine"], list) else [cfg["dialog"]["engine"]]
    for e in engines:
        if e["model"]["type"] == "binary":
            for name in _ctx_bins(e):
                (out / name).write_bytes(fake_context_binary("2.45.0.260326", size=2048, soc_model=77))
        else:
            (out / e["model"]["library"]["model-bin"]).write_bytes(b"\1" * 256)
    return out


def _manifest(tmp_path: Path, bundle: str) -> Path:
    m = tmp_path / "release.yaml"
    m.write_text(f"""release: llama-r1
board: iq-9075-evk
qairt: ['2.45.0.260326']
runtimes: [genie]
models:
  - {{name: llama, kind: genie, path: {bundle}, qairt: '2.45.0.260326'}}
""")
    return m


@pytest.mark.parametrize("config", CONFIGS)
def test_real_config_facts_are_reported(realworld, tmp_path, cli, config):
    d = make_bundle(realworld, tmp_path / "bundle", config)
    dialog = json.loads((_genie_dir(realworld) / config).read_text())["dialog"]
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 0, r.err
    assert "can run on iq-9075-evk" in r.out
    sampler = ", ".join(f"{k} {v}" for k, v in dialog["sampler"].items() if k != "version")
    for shown in ("QnnHtp (NPU)", dialog["type"], str(dialog["context"]["size"]), str(dialog["context"]["n-vocab"]),
                  sampler, "2.45.0.260326 (flavour auto)", "2.45.0.260326154327-auto", "77 / v73"):
        assert shown in r.out
    data = cli("inspect", d, "--json").json()
    assert data["qairt_builds"] == ["2.45.0.260326"] and data["details"]["qairt_flavour"] == "auto"
    assert data["npu_only"] is True and data["details"]["backend"] == "QnnHtp (NPU)"
    assert data["details"]["ctx_bins"] == _ctx_bins(dialog["engine"])
    # check takes the normalised build as pinned; the flavour does not get in the way
    assert cli("check", _manifest(tmp_path, "bundle")).code == 0


def test_missing_part_is_named_with_where_the_config_names_it(realworld, tmp_path, cli):
    d = make_bundle(realworld, tmp_path / "bundle", CONFIGS[0])
    gone = _ctx_bins(json.loads((d / "genie_config.json").read_text())["dialog"]["engine"])[1]
    (d / gone).unlink()
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1
    assert f"missing ctx-bin '{gone}' (named at dialog.engine.model.binary.ctx-bins[1]" in r.err


def test_template_copied_without_editing_is_named(realworld, tmp_path, cli):
    d = make_bundle(realworld, tmp_path / "bundle", CONFIGS[1], fill_template=False)
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1
    assert "htp_backend_ext_config.json: still the ai-hub-apps template" in r.err


def _cpu_engine(role: str | None = None) -> dict:
    e = {"version": 1, "n-threads": 6,
         "backend": {"version": 1, "type": "QnnGenAiTransformer",
                     "QnnGenAiTransformer": {"version": 1, "kv-quantization": False}},
         "model": {"version": 1, "type": "library", "library": {"version": 1, "model-bin": "llama_cpu_model.bin"}}}
    return {**e, "role": role} if role else e


def test_kv_share_list_of_engines_is_accepted(realworld, tmp_path, cli):
    def kv_share(dialog):
        dialog["type"] = "kv-share"
        dialog["engine"] = [{**dialog["engine"], "role": "primary"}, _cpu_engine("secondary")]

    d = make_bundle(realworld, tmp_path / "bundle", CONFIGS[0], change=kv_share)
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 0, r.err
    assert "kv-share" in r.out and "QnnHtp (NPU) + QnnGenAiTransformer (CPU)" in r.out
    (d / "llama_cpu_model.bin").unlink()
    r = cli("inspect", d, "--board", "iq-9075-evk")
    assert r.code == 1 and "missing model-bin 'llama_cpu_model.bin' (named at dialog.engine[1]" in r.err


def test_spd_every_engine_files_are_checked(realworld, tmp_path, cli):
    def spd(dialog):
        target = {**dialog["engine"], "role": "target"}
        draft = copy.deepcopy(target)
        draft["role"] = "draft"
        draft["model"]["binary"]["ctx-bins"] = ["llama_draft_part_1_of_2.bin", "llama_draft_part_2_of_2.bin"]
        dialog.update(type="spd", spd={"version": 1, "draft-len": 7}, engine=[target, draft])

    d = make_bundle(realworld, tmp_path / "bundle", CONFIGS[1], change=spd)
    data = cli("inspect", d, "--board", "iq-9075-evk", "--json").json()
    assert data["problems"] == [] and data["details"]["dialog_type"] == "spd"
    assert [e["role"] for e in data["details"]["engines"]] == ["target", "draft"]
    builds = {f["name"]: f["qairt_build"] for f in data["details"]["files"]}
    assert builds["llama_draft_part_2_of_2.bin"] == "2.45.0.260326"  # the draft's bins are read too
    (d / "llama_draft_part_2_of_2.bin").unlink()
    r = cli("inspect", d)
    assert r.code == 1 and "'llama_draft_part_2_of_2.bin' (named at dialog.engine[1].model.binary.ctx-bins[1]" in r.err


@pytest.mark.parametrize(("backend", "shown"), [("QnnGenAiTransformer", "QnnGenAiTransformer (CPU)"),
                                                ("QnnGpu", "QnnGpu (GPU)")])
def test_cpu_and_gpu_configs_are_reported_and_refused_by_check(realworld, tmp_path, cli, backend, shown):
    def off_npu(dialog):
        if backend == "QnnGpu":
            dialog["engine"]["backend"] = {"version": 1, "type": "QnnGpu"}
        else:
            dialog["engine"] = _cpu_engine()

    make_bundle(realworld, tmp_path / "bundle", CONFIGS[1], change=off_npu)
    r = cli("inspect", tmp_path / "bundle")
    assert r.code == 0 and shown in r.out and "QnnHtp" not in r.out
    r = cli("check", _manifest(tmp_path, "bundle"))
    assert r.code == 1
    refusals = [line for line in (r.out + r.err).splitlines() if "not the NPU" in line]
    assert len(refusals) == 1 and shown in refusals[0] and "models[0]" in refusals[0]
