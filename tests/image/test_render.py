"""`provisioner render`: deterministic kas output, the plan, and every bad input refused up front."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from kas import CONFIGSCHEMA
from provisioner import catalog
from provisioner.cli import main
from provisioner.errors import ManifestError, RenderError
from provisioner.image.render import LOCAL_FILE, MAIN_FILE, parse_repo_override, render
from provisioner.manifest import load_manifest
from provisioner.plan import make_plan, modelcheck
from tests.image.kas_fixtures import write_manifest

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _kas(result) -> dict:
    return yaml.safe_load((result.out_dir / MAIN_FILE).read_text())


def test_two_renders_of_one_manifest_are_byte_identical(tmp_path):
    m = load_manifest(REPO / "examples" / "gemma4-e2b-iq8275.yaml")
    a = render(m, tmp_path / "a")
    b = render(m, tmp_path / "b")
    render(m, tmp_path / "a")  # re-rendering in place changes nothing either
    ta, tb = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert ta == tb
    assert MAIN_FILE in ta and "layers/meta-edge-llm/conf/layer.conf" in ta
    assert "layers/meta-edge-llm-release/recipes-models/edge-llm-model-gemma-4-e2b/edge-llm-model-gemma-4-e2b.bb" in ta
    text = (tmp_path / "a" / MAIN_FILE).read_text()
    assert "DATETIME" not in text.replace("local-${DATETIME}", "")  # only quoted in the explanation
    assert str(tmp_path) not in text  # no absolute render path: the container mounts it elsewhere
    assert a.kas_file == (tmp_path / "a" / MAIN_FILE).resolve() and b.kas_files


def test_kas_file_is_valid_kas_and_carries_the_release_pins(tmp_path):
    m = load_manifest(REPO / "examples" / "gemma4-e2b-iq8275.yaml")
    res = render(m, tmp_path / "out")
    cfg = _kas(res)
    jsonschema.validate(cfg, CONFIGSCHEMA)
    rel = catalog.release("qli-2.0")
    assert cfg["header"]["version"] == rel.kas_header_version
    assert cfg["header"]["includes"] == [{"repo": "meta-qcom", "file": "ci/iq-8275-evk.yml"},
                                         {"repo": "meta-qcom", "file": "ci/qcom-distro-multimedia-image.yml"}]
    for name, pin in rel.lock.items():
        assert cfg["repos"][name] == {"url": pin["url"], "branch": pin["branch"], "commit": pin["commit"]}
        assert cfg["overrides"]["repos"][name] == {"commit": pin["commit"]}
    assert cfg["machine"] == "iq-8275-evk" and cfg["target"] == ["edge-llm-image"]
    assert cfg["repos"]["edge-llm"]["layers"] == {"layers/meta-edge-llm": None, "layers/meta-edge-llm-release": None}


def test_production_and_debug_policy_snippets(tmp_path):
    prod = render(load_manifest(write_manifest(tmp_path / "p.yaml", release="prod-1")), tmp_path / "p")
    lch = _kas(prod)["local_conf_header"]
    # entries of our own only: kas would REPLACE meta-qcom's same-named ci/base.yml entries
    assert not set(lch) & {"base", "diskmon", "clo-mirrors", "cmdline", "qcomflash", "extra", "os-release"}
    assert 'KERNEL_CMDLINE_EXTRA:remove = "qcom_scm.download_mode=1"' in lch["edge-llm-cmdline"]
    assert 'KERNEL_CMDLINE_EXTRA:append = " qcom_scm.download_mode=0"' in lch["edge-llm-cmdline"]
    login = lch["edge-llm-login"]
    assert 'EXTRA_IMAGE_FEATURES:remove = "allow-empty-password empty-root-password allow-root-login"' in login
    assert 'IMAGE_FEATURES:remove = "allow-empty-password empty-root-password allow-root-login"' in login
    assert 'BUILD_ID = "prod-1"' in lch["edge-llm-os-release"]
    assert "DATETIME" not in lch["edge-llm-os-release"].split("\n", 1)[1]
    assert 'EDGE_LLM_LOGIN_POLICY = "keys-only"' in lch["edge-llm"]
    assert "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyOnly0000 ops@test" in lch["edge-llm"]
    assert 'EDGE_LLM_DOWNLOAD_MODE = "0"' in lch["edge-llm"]
    assert list(lch) == sorted(lch)  # the file lists them in the order kas writes them

    dbg = render(load_manifest(write_manifest(tmp_path / "d.yaml", release="dbg-1",
                                              image={"variant": "debug"})), tmp_path / "d")
    lch = _kas(dbg)["local_conf_header"]
    assert "KERNEL_CMDLINE_EXTRA" not in lch["edge-llm-cmdline"]  # meta-qcom's cmdline entry gives =1
    assert "edge-llm-login" not in lch  # meta-qcom's own debug conveniences stay
    assert 'EDGE_LLM_LOGIN_POLICY = "debug"' in lch["edge-llm"]


def test_cache_snippet_from_manifest_and_no_dl_dir(tmp_path):
    build = {"hashserve": "hashserv.lan:8686", "sstate_mirrors": ["https://sstate.lan/wrynose"],
             "mirrors": ["https://mirror.lan/downloads"], "dl_dir": str(tmp_path / "dl"),
             "sstate_dir": str(tmp_path / "sstate")}
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml", build=build)), tmp_path / "out")
    cache = _kas(res)["local_conf_header"]["edge-llm-cache"]
    assert 'BB_SIGNATURE_HANDLER = "OEEquivHash"' in cache
    assert 'BB_HASHSERVE = "hashserv.lan:8686"' in cache
    assert "file://.* https://sstate.lan/wrynose/PATH;downloadfilename=PATH" in cache
    assert "https://mirror.lan/downloads/" in cache
    text = (res.out_dir / MAIN_FILE).read_text()
    assert "DL_DIR" not in text.replace("DL_DIR/SSTATE_DIR come", "") and "SSTATE_DIR =" not in text


def test_model_change_touches_only_the_model_recipe_and_image_data(tmp_path):
    models_b = [{"name": "gemma-4-e2b", "kind": "litertlm", "qairt": "2.44.0.260225", "size": 3294593024,
                 "sha256": "cd" * 32, "url": "https://models.example.invalid/v2/gemma-4-E2B-it_qualcomm_qcs8275.litertlm"}]
    a = render(load_manifest(write_manifest(tmp_path / "a.yaml")), tmp_path / "a")
    b = render(load_manifest(write_manifest(tmp_path / "b.yaml", models=models_b)), tmp_path / "b")
    ta, tb = _tree(a.out_dir), _tree(b.out_dir)
    changed = {k for k in ta.keys() | tb.keys() if ta.get(k) != tb.get(k)}
    assert changed == {MAIN_FILE, "layers/meta-edge-llm-release/recipes-models/edge-llm-model-gemma-4-e2b/"
                                  "edge-llm-model-gemma-4-e2b.bb"}
    ka, kb = _kas(a), _kas(b)
    diff = {k for k in ka["local_conf_header"] if ka["local_conf_header"][k] != kb["local_conf_header"][k]}
    assert diff == {"edge-llm-release"}  # only edge-llm-image reads it
    assert {k: v for k, v in ka.items() if k != "local_conf_header"} == \
        {k: v for k, v in kb.items() if k != "local_conf_header"}


def test_plan_lines_say_what_is_built(tmp_path):
    m = load_manifest(REPO / "examples" / "gemma4-e2b-iq8275.yaml")
    lines = render(m, tmp_path / "o").lines()
    text = "\n".join(lines)
    assert "edge-llm-image for IQ-8275 EVK (MACHINE=iq-8275-evk, Hexagon v75, soc_model 82)" in text
    assert "QAIRT 2.44.0.260225 -> /opt/qairt/2.44.0.260225" in text
    assert "LiteRT-LM cbf463d97fa3" in text and "gemma-4-e2b" in text
    assert "download_mode=0" in text


def test_release_json_and_model_recipe_content(tmp_path):
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml", release="r-9")), tmp_path / "o")
    line = next(ln for ln in res.snippets["edge-llm-release"].splitlines() if ln.startswith("EDGE_LLM_RELEASE_JSON"))
    data = json.loads(line.split("= ", 1)[1].strip("'"))
    assert data["release"] == "r-9" and data["board"] == "iq-8275-evk" and data["qairt"] == ["2.44.0.260225"]
    assert data["models"][0]["version"] == ("ab" * 32)[:16]
    recipe = (res.out_dir / "layers/meta-edge-llm-release/recipes-models/edge-llm-model-gemma-4-e2b/"
              "edge-llm-model-gemma-4-e2b.bb").read_text()
    assert 'EDGE_LLM_MODEL_SHA256 = "' + "ab" * 32 + '"' in recipe
    assert "inherit edge-llm-model" in recipe and "r-9" not in recipe  # release id stays out of the model recipe


# --- bad input -------------------------------------------------------------------------------------


def _with_release(monkeypatch, rid: str, **changes) -> None:
    base = catalog.release("qli-2.0")
    extra = dataclasses.replace(base, id=rid, **changes)
    table = {**catalog.releases(), rid: extra}
    monkeypatch.setattr(catalog, "releases", lambda: table)


def test_board_not_supported_by_release(tmp_path, monkeypatch):
    m = load_manifest(write_manifest(tmp_path / "m.yaml"))
    _with_release(monkeypatch, "qli-9075-only", machines=("iq-9075-evk",))
    with pytest.raises(RenderError) as e:
        render(dataclasses.replace(m, qli="qli-9075-only"), tmp_path / "out")
    assert "iq-8275-evk is not supported by qli-9075-only" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_include_missing_from_pinned_meta_qcom_is_refused_before_any_build(tmp_path):
    m = load_manifest(write_manifest(tmp_path / "m.yaml"))
    with pytest.raises(RenderError) as e:
        render(m, tmp_path / "out", extra_includes=("ci/linux-qcom-6.18.yml",))
    assert "meta-qcom/ci/linux-qcom-6.18.yml does not exist in meta-qcom at qli-2.0" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_qairt_without_recipe_then_adding_one_small_file(tmp_path, monkeypatch):
    import shutil

    from provisioner import plan as plan_mod

    versions = dict(catalog.qairt_catalog()["versions"])
    versions["2.46.0.260501"] = {"status": "supported", "note": "test"}
    monkeypatch.setitem(catalog.qairt_catalog(), "versions", versions)
    models = [{"name": "m46", "kind": "genie", "qairt": "2.46.0.260501", "url": "https://x.invalid/m46.tar",
               "sha256": "ef" * 32}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", board="iq-9075-evk", qairt=("2.46.0.260501",),
                                     models=models))
    with pytest.raises(RenderError) as e:
        make_plan(m)
    assert "QAIRT 2.46.0.260501 has no recipe" in str(e.value) and "require qairt-runtime.inc" in str(e.value)
    layer = tmp_path / "layer"
    shutil.copytree(plan_mod.LAYER_DIR, layer)
    (layer / "recipes-ai/qairt/qairt-runtime-2.46.0.260501.bb").write_text("require qairt-runtime.inc\n")
    plan = make_plan(m, layer=layer)
    assert plan.qairt_recipes == ("qairt-runtime-2.46.0.260501",)


def test_litert_runtime_needs_its_qairt_build(tmp_path):
    models = [{"name": "nano", "kind": "genie", "qairt": "2.45.0.260326", "url": "https://x.invalid/b.tar"}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", board="iq-9075-evk", qairt=("2.45.0.260326",),
                                     runtimes=("genie", "litert_lm"), models=models))
    with pytest.raises(RenderError) as e:
        make_plan(m)
    assert "LiteRT-LM cbf463d97fa3 is built against QAIRT 2.44.0.260225" in str(e.value)


def test_model_qairt_mismatch_refused_with_the_layer_message(tmp_path):
    from provisioner.sim.synthetic_models import make_litertlm

    f = make_litertlm(tmp_path / "gemma.litertlm", qairt="2.45.0.260326")  # compiled for another build
    models = [{"name": "gemma-x", "kind": "litertlm", "qairt": "2.44.0.260225", "path": str(f)}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", models=models))
    with pytest.raises(RenderError) as e:
        render(m, tmp_path / "out")
    mc = modelcheck()
    expected = mc.check_message(mc.ModelFacts("gemma-x", "litertlm", "2.45.0.260326"),
                                mc.ImageFacts("iq-8275-evk", ("2.44.0.260225",), 82, "v75"))
    assert str(e.value) == expected
    assert "model gemma-x needs QAIRT 2.45.0.260326 but the iq-8275-evk image carries 2.44.0.260225" in expected
    assert not (tmp_path / "out").exists()


def test_genie_bundle_for_another_soc_refused(tmp_path):
    from provisioner.sim.synthetic_models import make_genie_bundle

    bundle = make_genie_bundle(tmp_path / "bundle", soc_model=77, dsp_arch="v73")
    models = [{"name": "nano", "kind": "genie", "qairt": "2.45.0.260326", "path": str(bundle)}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", qairt=("2.45.0.260326",), models=models))
    with pytest.raises(RenderError) as e:
        make_plan(m)
    assert "compiled for soc_model 77 but iq-8275-evk is soc_model 82" in str(e.value)
    assert "dsp_arch v73 but iq-8275-evk has Hexagon v75" in str(e.value)
    ok = make_plan(load_manifest(write_manifest(tmp_path / "n.yaml", board="iq-9075-evk", qairt=("2.45.0.260326",),
                                                models=models)))
    assert ok.models[0].soc_model == 77 and ok.models[0].facts_from == "inspected"


def test_failed_render_keeps_the_previous_output(tmp_path):
    good = load_manifest(write_manifest(tmp_path / "g.yaml"))
    out = tmp_path / "out"
    render(good, out)
    before = _tree(out)
    with pytest.raises(RenderError):
        render(good, out, extra_includes=("ci/does-not-exist.yml",))
    assert _tree(out) == before


def test_repo_overrides_go_to_a_separate_file(tmp_path):
    m = load_manifest(write_manifest(tmp_path / "m.yaml"))
    plain = render(m, tmp_path / "a")
    over = render(m, tmp_path / "b", repo_overrides={"oe-core": {"url": "file:///srv/oe-core", "commit": "1" * 40}})
    assert (plain.out_dir / MAIN_FILE).read_bytes() == (over.out_dir / MAIN_FILE).read_bytes()
    assert over.kas_file.name == LOCAL_FILE
    local = yaml.safe_load(over.kas_file.read_text())
    assert local["header"]["includes"] == [MAIN_FILE]
    assert local["overrides"]["repos"]["oe-core"] == {"url": "file:///srv/oe-core", "commit": "1" * 40}
    assert parse_repo_override("meta-qcom=file:///x/meta-qcom@abc") == ("meta-qcom", {"url": "file:///x/meta-qcom",
                                                                                      "commit": "abc"})
    assert parse_repo_override("oe-core=@abc") == ("oe-core", {"commit": "abc"})
    with pytest.raises(RenderError):
        parse_repo_override("nothing")


def test_cli_render_text_json_and_errors(tmp_path, capsys):
    mf = write_manifest(tmp_path / "m.yaml")
    assert main(["render", str(mf), "--out", str(tmp_path / "o"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kas_file"].endswith(MAIN_FILE) and data["plan"]["machine"] == "iq-8275-evk"
    assert "edge-llm-cache" in data["local_conf_header"]
    assert main(["render", str(mf), "--out", str(tmp_path / "o")]) == 0
    assert "QAIRT 2.44.0.260225 -> /opt/qairt/2.44.0.260225" in capsys.readouterr().out
    rc = main(["render", str(mf), "--out", str(tmp_path / "p"), "--include", "ci/linux-qcom-6.18.yml"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "linux-qcom-6.18.yml does not exist" in err


def test_bad_inference_user_refused(tmp_path):
    # refused by `check` already (manifest validation), so render never sees it
    with pytest.raises(ManifestError, match="image.inference_user: 'llm user' is not a valid Linux user name"):
        load_manifest(write_manifest(tmp_path / "m.yaml", image={"variant": "debug", "inference_user": "llm user"}))
