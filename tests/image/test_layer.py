"""meta-edge-llm: parsed by bitbake's real parser, linted by oelint-adv, tasks run on fixture inputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.errors import RenderError
from provisioner.image.render import render
from provisioner.manifest import load_manifest
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest

LAYER = bbparse.LAYER
RECIPES = sorted(LAYER.glob("recipes-*/*/*.bb"))
LAYER_VAR_RE = re.compile(r"\b((?:EDGE_LLM|QAIRT|LITERT_LM)_[A-Z0-9_]*[A-Z0-9])\b")


def _rendered_local_conf(result) -> str:
    cfg = yaml.safe_load(result.kas_file.read_text())
    return "".join(cfg["local_conf_header"][k] for k in sorted(cfg["local_conf_header"]))


def _env(tmp_path: Path, distro_layer: Path, result=None, local: str = "", machine: str = "iq-8275-evk") -> Path:
    extra = (distro_layer,)
    if result is not None:
        extra += (result.out_dir / "layers" / "meta-edge-llm-release",)
        local = _rendered_local_conf(result) + local
    return bbparse.make_env(tmp_path, extra, local_conf=local + 'DEBUG_LOGIN = "x"\n', machine=machine)


def test_layer_conf(tmp_path, distro_layer):
    d = bbparse.base_data(_env(tmp_path, distro_layer))
    assert "edge-llm" in d.getVar("BBFILE_COLLECTIONS").split()
    assert d.getVar("LAYERSERIES_COMPAT_edge-llm") == "wrynose"
    assert d.getVar("LAYERDEPENDS_edge-llm").split() == ["core", "qcom", "qcom-distro"]
    assert d.getVar("BBFILE_PRIORITY_edge-llm") == "10"
    import bb.utils

    assert "edgellm" in bb.utils._context  # addpylib made lib/edgellm importable for the bbclass


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_recipe_parses(recipe, tmp_path, distro_layer):
    local = ('EDGE_LLM_QAIRT_VERSIONS = "2.44.0.260225"\nEDGE_LLM_RUNTIMES = "litert_lm"\n'
             'EDGE_LLM_HEXAGON_ARCH = "v75"\n')
    d = bbparse.parse_recipe(recipe, _env(tmp_path, distro_layer, local=local))
    assert d.getVar("PN") == recipe.name.removesuffix(".bb").split("_")[0]
    assert d.getVar("LICENSE")
    assert "do_install" in d.getVar("__BBTASKS", False) or d.getVar("PN").endswith("-image")


def test_generated_model_recipes_parse_and_lint(tmp_path, distro_layer):
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml")), tmp_path / "out")
    recipe = next((res.out_dir / "layers" / "meta-edge-llm-release").rglob("*.bb"))
    d = bbparse.parse_recipe(recipe, _env(tmp_path, distro_layer, res))
    assert d.getVar("EDGE_LLM_MODEL_NAME") == "gemma-4-e2b" and d.getVar("PACKAGE_ARCH") == "iq_8275_evk"
    assert d.getVar("SRC_URI").startswith("https://models.example.invalid/gemma-4-E2B-it_qualcomm_qcs8275.litertlm;")
    assert d.getVarFlag("SRC_URI", "model.sha256sum") == "ab" * 32
    assert d.getVar("FILES:edge-llm-model-gemma-4-e2b").split() == [on_board.model_dir("gemma-4-e2b")]
    _oelint([recipe])


def _oelint(files: list[Path]) -> None:
    env = {**os.environ, "OELINT_CONFIG": str(LAYER / ".oelint.cfg")}
    proc = subprocess.run(["oelint-adv", "--quiet", "--jobs", "1", *map(str, files)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr


def test_layer_is_clean_under_oelint():
    files = sorted([*LAYER.rglob("*.bb"), *LAYER.rglob("*.bbclass"), *LAYER.rglob("*.inc"), *LAYER.rglob("*.bbappend")])
    assert len(files) >= 10
    _oelint(files)
    cfg = (LAYER / ".oelint.cfg").read_text()
    rules = [ln.strip() for ln in cfg.splitlines() if ln.startswith("  oelint.")]
    for rule in rules:  # every suppressed rule is explained by a comment right above it (or above its group)
        block = cfg.split(rule)[0].rstrip().splitlines()
        assert any(ln.startswith("#") for ln in block[-6:]), rule


def test_readme_documents_every_variable_the_layer_reads():
    text = ""
    for p in LAYER.rglob("*"):
        if p.suffix in (".bb", ".bbclass", ".inc", ".conf") or p.name == "modelcheck.py":
            text += p.read_text()
    used = set(LAYER_VAR_RE.findall(text))
    readme = (LAYER / "README.md").read_text()
    missing = sorted(v for v in used if f"`{v}`" not in readme)
    assert not missing, missing
    assert len(used) > 30


def test_board_variables_default_to_the_contract_and_render_sets_them(tmp_path, distro_layer):
    """conf/edge-llm-board.conf's weak defaults (a layer parsed without render) equal contracts.board's
    paths and contracts.memlock's default limits, and render's edge-llm entry sets the same names."""
    from provisioner.contracts import memlock

    wanted = {**on_board.layer_variables(), **memlock.layer_variables()}
    d = bbparse.base_data(_env(tmp_path, distro_layer))
    assert {k: d.getVar(k) for k in wanted} == wanted
    defaults = (LAYER / "conf" / "edge-llm-board.conf").read_text()
    assert set(re.findall(r"^(EDGE_LLM_[A-Z0-9_]+) \?\?=", defaults, re.M)) == set(wanted)
    render(load_manifest(write_manifest(tmp_path / "m.yaml")), tmp_path / "out")
    conf = yaml.safe_load((tmp_path / "out" / "edge-llm.yml").read_text())["local_conf_header"]["edge-llm"]
    for k, v in wanted.items():
        assert f'{k} = "{v}"' in conf.splitlines()


def test_paths_agree_with_the_layout_contract(tmp_path, distro_layer):
    env = _env(tmp_path, distro_layer)
    mem = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-memlock/edge-llm-memlock.bb", env)
    assert mem.getVar("EDGE_LLM_LIMITS_FILE") == on_board.LIMITS_FILE
    assert mem.getVar("EDGE_LLM_SYSTEMD_DROPIN") == on_board.SYSTEMD_MEMLOCK_DROPIN
    serve_dropin = f"{on_board.SERVE_UNIT_DIR}/{on_board.SERVE_UNIT}.d/50-edge-llm-memlock.conf"
    assert mem.getVar("EDGE_LLM_SERVE_DROPIN") == serve_dropin == on_board.SERVE_MEMLOCK_DROPIN
    dm = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-download-mode/edge-llm-download-mode.bb", env)
    assert dm.getVar("EDGE_LLM_DOWNLOAD_MODE_PARAM") == on_board.DOWNLOAD_MODE_PARAM
    user = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-user/edge-llm-user.bb", env)
    assert user.getVar("EDGE_LLM_FASTRPC_GROUP") == on_board.FASTRPC_GROUP
    ident = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-identity/edge-llm-identity.bb", env)
    assert (ident.getVar("EDGE_LLM_IDENTITY_ISSUE"), ident.getVar("EDGE_LLM_IDENTITY_RUNFILE")) == \
        (on_board.IDENTITY_ISSUE, on_board.IDENTITY_RUN_FILE)
    image = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", env)
    assert image.getVar("EDGE_LLM_RELEASE_FILE") == on_board.RELEASE_JSON
    q = bbparse.parse_recipe(LAYER / "recipes-ai/qairt/qairt-runtime-2.44.0.260225.bb", env)
    assert q.getVar("QAIRT_DIR") == on_board.qairt_dir("2.44.0.260225")
    lt = bbparse.parse_recipe(LAYER / "recipes-ai/litert-lm/litert-lm-runtime.bb", env)
    assert f"{lt.getVar('LITERT_LM_ROOT')}/{lt.getVar('LITERT_LM_REV')}" == on_board.litert_dir()
    assert lt.getVar("LITERT_LM_QAIRT") == on_board.LITERT_QAIRT
    assert lt.getVar("LITERT_LM_TARBALL") == "litert-lm-runtime-cbf463d97fa3-qairt2.44.0.260225-aarch64.tar.gz"
    assert lt.getVar("RDEPENDS:litert-lm-runtime") == "qairt-runtime-2.44.0.260225"


def test_litert_recipe_defaults_are_the_provisioners_pins(tmp_path, distro_layer):
    """The recipe's weak defaults (a layer used without render) equal contracts.pins, and a rendered
    build gets the pins from render's edge-llm entry, which the recipe reads instead of restating."""
    from provisioner.contracts import pins

    env = _env(tmp_path, distro_layer)
    lt = bbparse.parse_recipe(LAYER / "recipes-ai/litert-lm/litert-lm-runtime.bb", env)
    assert {k: lt.getVar(k) for k in pins.layer_variables()} == pins.layer_variables()
    assert lt.getVar("RDEPENDS:litert-lm-runtime") == pins.qairt_recipe(pins.LITERT_LM_QAIRT)
    m = load_manifest(write_manifest(tmp_path / "m.yaml", runtimes=("litert_lm",)))
    render(m, tmp_path / "out")
    conf = yaml.safe_load((tmp_path / "out" / "edge-llm.yml").read_text())["local_conf_header"]["edge-llm"]
    for k, v in pins.layer_variables().items():
        assert f'{k} = "{v}"' in conf.splitlines()


def _run(d, func: str) -> None:
    import bb.build

    for var in ("T", "D", "UNPACKDIR"):
        os.makedirs(d.getVar(var), exist_ok=True)
    bb.build.exec_func(func, d)


def _packages(d, dest: Path) -> dict[str, list[str]]:
    """Assign installed files to packages by FILES, in PACKAGES order (what do_package does)."""
    import fnmatch

    files = sorted("/" + p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() or p.is_symlink())
    out: dict[str, list[str]] = {}
    for pkg in d.getVar("PACKAGES").split():
        pats = (d.getVar("FILES:" + pkg) or "").split()
        out[pkg] = [f for f in files if any(f == p or f.startswith(p.rstrip("/") + "/") or fnmatch.fnmatch(f, p)
                                            for p in pats)]
        files = [f for f in files if f not in out[pkg]]
    assert not files, f"files in no package: {files}"
    return out


@pytest.mark.parametrize("board_id", ["iq-8275-evk", "iq-9075-evk"])
def test_qairt_install_side_by_side_with_the_machine_skel(board_id, tmp_path, distro_layer):
    """do_install on an unpacked stand-in of the QAIRT zip: /opt/qairt/<build>/..., one package per skel arch."""
    board = catalog.board(board_id)
    v = "2.45.0.260326"
    d = bbparse.parse_recipe(LAYER / f"recipes-ai/qairt/qairt-runtime-{v}.bb", _env(tmp_path, distro_layer))
    s = Path(d.getVar("S"))
    host = s / "lib" / "aarch64-oe-linux-gcc11.2"
    for name in ("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpV75Stub.so", "libQnnHtpV73Stub.so",
                 "libQnnHtpPrepare.so", "libGenie.so"):
        (host / name).parent.mkdir(parents=True, exist_ok=True)
        (host / name).write_bytes(b"\x7fELF fixture")
    for arch in ("v68", "v73", "v75", "v79"):
        skel = s / "lib" / f"hexagon-{arch}" / "unsigned" / f"libQnnHtp{arch.upper()}Skel.so"
        skel.parent.mkdir(parents=True, exist_ok=True)
        skel.write_bytes(b"skel")
    for tool in ("genie-t2t-run", "qnn-net-run"):
        (s / "bin" / "aarch64-oe-linux-gcc11.2").mkdir(parents=True, exist_ok=True)
        (s / "bin" / "aarch64-oe-linux-gcc11.2" / tool).write_text("#!/bin/sh\n")
    (s / "LICENSE.pdf").write_bytes(b"%PDF")
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    pkgs = _packages(d, dest)
    pn = f"qairt-runtime-{v}"
    wanted = [p for p in on_board.qairt_files(board, v, with_genie=True)]
    # what packagegroup-edge-llm installs for this machine with a Genie runtime
    installed = set(pkgs[pn] + pkgs[f"{pn}-hexagon-{board.hexagon_arch}"] + pkgs[f"{pn}-genie"])
    assert set(wanted) <= installed
    assert not any("/usr/" in f for f in installed)  # never in meta-qcom's qairt-sdk places
    assert pkgs[f"{pn}-hexagon-v75"] == [f"/opt/qairt/{v}/lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so"]
    assert not any("hexagon-v68" in f for fs in pkgs.values() for f in fs)  # only QAIRT_HEXAGON_ARCHS
    assert (dest / f"opt/qairt/{v}/VERSION").read_text().strip() == v


def test_qairt_fetch_refuses_without_checksums(tmp_path, distro_layer, fatal):
    import bb

    d = bbparse.parse_recipe(LAYER / "recipes-ai/qairt/qairt-runtime-2.44.0.260225.bb", _env(tmp_path, distro_layer))
    with pytest.raises(bb.BBHandledException):
        _run(d, "qairt_require_checksums")
    assert any("QAIRT_SHA256 and QAIRT_LICENSE_MD5 not set" in m and "provisioner fetch" in m for m in fatal.messages)
    local = ('QAIRT_SHA256:pn-qairt-runtime-2.44.0.260225 = "' + "0" * 64 + '"\n'
             'QAIRT_LICENSE_MD5:pn-qairt-runtime-2.44.0.260225 = "' + "1" * 32 + '"\n')
    d = bbparse.parse_recipe(LAYER / "recipes-ai/qairt/qairt-runtime-2.44.0.260225.bb",
                             _env(tmp_path, distro_layer, local=local))
    _run(d, "qairt_require_checksums")
    assert d.getVarFlag("SRC_URI", "qairt.sha256sum") == "0" * 64
    other = bbparse.parse_recipe(LAYER / "recipes-ai/qairt/qairt-runtime-2.45.0.260326.bb",
                                 _env(tmp_path, distro_layer, local=local))
    assert other.getVar("QAIRT_SHA256") == ""  # per-build: the :pn- override reaches only its recipe


def test_litert_runtime_install(tmp_path, distro_layer):
    d = bbparse.parse_recipe(LAYER / "recipes-ai/litert-lm/litert-lm-runtime.bb", _env(tmp_path, distro_layer))
    s = Path(d.getVar("S")) / "top"
    for f in on_board.LITERT_FILES:
        (s / f).parent.mkdir(parents=True, exist_ok=True)
        (s / f).write_bytes(b"\x7fELF")
    patches = Path(d.getVar("UNPACKDIR")) / "patches"
    patches.mkdir(parents=True)
    files = LAYER / "recipes-ai/litert-lm/files"
    uris = d.getVar("SRC_URI").split()
    for p in sorted(files.glob("000*.patch")):
        assert f"file://{p.name};apply=no;subdir=patches" in uris
        (patches / p.name).write_bytes(p.read_bytes())
    _run(d, "do_install")
    dest = Path(d.getVar("D")) / on_board.litert_dir().lstrip("/")
    for f in on_board.LITERT_FILES:
        assert (dest / f).is_file()
    assert os.access(dest / "bin/litert_lm_main", os.X_OK)
    assert sorted(p.name for p in (dest / "patches").iterdir()) == sorted(p.name for p in files.glob("000*.patch"))


def test_memlock_files(tmp_path, distro_layer):
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-memlock/edge-llm-memlock.bb", _env(tmp_path, distro_layer))
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    limits = (dest / on_board.LIMITS_FILE.lstrip("/")).read_text()
    assert "*    hard    memlock    unlimited" in limits
    # pam_limits skips '*' for root: the fleet's reading of the file must give root unlimited too
    from provisioner.fleet.verify import pam_memlock

    assert pam_memlock("root", [limits]) == "infinity"
    assert pam_memlock("llm", [limits]) == "infinity"
    assert "DefaultLimitMEMLOCK=infinity" in (dest / on_board.SYSTEMD_MEMLOCK_DROPIN.lstrip("/")).read_text()
    serve = dest / f"{on_board.SERVE_UNIT_DIR}/{on_board.SERVE_UNIT}.d/50-edge-llm-memlock.conf".lstrip("/")
    assert serve.read_text().splitlines()[1:] == ["[Service]", "LimitMEMLOCK=infinity"]


def test_serve_recipe_installs_the_unit_the_fleet_writes(tmp_path, distro_layer):
    """The image's edge-llm-serve@.service is the text ``fleet launch`` writes, for the manifest's user."""
    import shutil

    from provisioner.fleet import launch

    d = bbparse.parse_recipe(LAYER / "recipes-ai/edge-llm-serve/edge-llm-serve_1.0.bb",
                             _env(tmp_path, distro_layer, local='EDGE_LLM_INFERENCE_USER = "svc"\n'))
    os.makedirs(d.getVar("UNPACKDIR"), exist_ok=True)
    shutil.copytree(LAYER / "recipes-ai/edge-llm-serve/files", d.getVar("UNPACKDIR"), dirs_exist_ok=True)
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    unit = dest / (d.getVar("systemd_system_unitdir") + "/" + on_board.SERVE_UNIT).lstrip("/")
    assert unit.read_text() == launch.unit_text("svc")
    assert os.access(dest / on_board.SERVE_BIN.lstrip("/"), os.X_OK)
    assert (dest / on_board.SERVE_CONFIG_DIR.lstrip("/")).is_dir()


@pytest.mark.parametrize("mode", ["0", "1"])
def test_download_mode_service(mode, tmp_path, distro_layer):
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-download-mode/edge-llm-download-mode.bb",
                             _env(tmp_path, distro_layer, local=f'EDGE_LLM_DOWNLOAD_MODE = "{mode}"\n'))
    unpack = Path(d.getVar("UNPACKDIR"))
    unpack.mkdir(parents=True, exist_ok=True)
    src = LAYER / "recipes-core/edge-llm-download-mode/files/edge-llm-download-mode.service.in"
    (unpack / src.name).write_text(src.read_text())
    _run(d, "do_install")
    unit = (Path(d.getVar("D")) / "usr/lib/systemd/system/edge-llm-download-mode.service").read_text()
    assert f"ExecStart=/bin/sh -c 'echo {mode} > {on_board.DOWNLOAD_MODE_PARAM}'" in unit
    assert d.getVar("SYSTEMD_SERVICE:edge-llm-download-mode") == "edge-llm-download-mode.service"


def test_inference_user_in_fastrpc_group(tmp_path, distro_layer):
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-user/edge-llm-user.bb",
                             _env(tmp_path, distro_layer, local='EDGE_LLM_INFERENCE_USER = "svc"\n'))
    params = d.getVar("USERADD_PARAM:edge-llm-user").split()
    assert params[params.index("--groups") + 1] == "fastrpc" and params[-1] == "svc"
    assert d.getVar("GROUPADD_PARAM:edge-llm-user").split() == ["--system", "fastrpc"]
    preset = (LAYER / "recipes-core/edge-llm-user/files/50-edge-llm.preset").read_text()
    assert f"enable {on_board.FASTRPC_SERVICE}" in preset


@pytest.mark.parametrize("manifest,expect", [
    ("gemma4-e2b-iq8275.yaml", {"qairt-runtime-2.44.0.260225", "qairt-runtime-2.44.0.260225-hexagon-v75",
                                "litert-lm-runtime"}),
    ("nemotron-nano-iq9075.yaml", {"qairt-runtime-2.45.0.260326", "qairt-runtime-2.45.0.260326-hexagon-v73",
                                   "qairt-runtime-2.45.0.260326-genie"}),
])
def test_packagegroup_follows_the_manifest(manifest, expect, tmp_path, distro_layer):
    m = load_manifest(Path(__file__).resolve().parents[2] / "examples" / manifest)
    res = render(m, tmp_path / "out", inspect=False)
    d = bbparse.parse_recipe(LAYER / "recipes-core/packagegroups/packagegroup-edge-llm.bb",
                             _env(tmp_path, distro_layer, res, machine=m.board.kas_machine))
    deps = set(d.getVar("RDEPENDS:packagegroup-edge-llm").split())
    runtime = {x for x in deps if x.startswith(("qairt-runtime", "litert-lm"))}
    assert runtime == expect
    assert {"fastrpc", "edge-llm-memlock", "edge-llm-download-mode", "edge-llm-user", "edge-llm-login",
            "edge-llm-serve"} <= deps


# --- the model rule at build time: same words as render -------------------------------------------------


def _genie_case(tmp_path: Path):
    from provisioner.sim.synthetic_models import make_genie_bundle

    bundle = make_genie_bundle(tmp_path / "nano-bundle", soc_model=77, dsp_arch="v73")
    models = [{"name": "nano", "kind": "genie", "qairt": "2.45.0.260326", "path": str(bundle)}]
    return bundle, load_manifest(write_manifest(tmp_path / "m.yaml", qairt=("2.45.0.260326",), models=models))


def test_build_fails_at_parse_on_declared_mismatch_with_render_message(tmp_path, distro_layer, fatal):
    import bb

    bundle, m = _genie_case(tmp_path)
    with pytest.raises(RenderError) as refused:
        render(m, tmp_path / "refused")
    res = render(m, tmp_path / "out", inspect=False)  # declared values only: render lets it through
    recipe = next((res.out_dir / "layers" / "meta-edge-llm-release").rglob("*.bb"))
    text = recipe.read_text()
    text = text.replace('EDGE_LLM_MODEL_SOC_MODEL = ""', 'EDGE_LLM_MODEL_SOC_MODEL = "77"')
    text = text.replace('EDGE_LLM_MODEL_DSP_ARCH = ""', 'EDGE_LLM_MODEL_DSP_ARCH = "v73"')
    recipe.write_text(text)
    with pytest.raises(bb.BBHandledException):
        bbparse.parse_recipe(recipe, _env(tmp_path, distro_layer, res))
    assert str(refused.value) in fatal.messages


def test_build_fails_in_verify_task_on_the_real_bundle(tmp_path, distro_layer, fatal):
    """A recipe that parses fine (declared values match) still fails when the unpacked bundle says otherwise."""
    import shutil

    import bb

    bundle, m = _genie_case(tmp_path)
    with pytest.raises(RenderError) as refused:
        render(m, tmp_path / "refused")
    res = render(m, tmp_path / "out", inspect=False)
    recipe = next((res.out_dir / "layers" / "meta-edge-llm-release").rglob("*.bb"))
    d = bbparse.parse_recipe(recipe, _env(tmp_path, distro_layer, res))
    unpacked = Path(d.getVar("UNPACKDIR")) / "model" / bundle.name
    shutil.copytree(bundle, unpacked)
    with pytest.raises(bb.BBHandledException):
        _run(d, "do_edge_llm_verify")
    assert str(refused.value) in fatal.messages


def test_model_install_writes_model_json_and_current(tmp_path, distro_layer):
    from provisioner.sim.synthetic_models import make_genie_bundle

    bundle = make_genie_bundle(tmp_path / "nano-bundle", soc_model=77, dsp_arch="v73")
    models = [{"name": "nano", "kind": "genie", "qairt": "2.45.0.260326", "path": str(bundle)}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", board="iq-9075-evk", qairt=("2.45.0.260326",),
                                     models=models))
    res = render(m, tmp_path / "out")
    recipe = next((res.out_dir / "layers" / "meta-edge-llm-release").rglob("*.bb"))
    d = bbparse.parse_recipe(recipe, _env(tmp_path, distro_layer, res, machine="iq-9075-evk"))
    assert d.getVar("EDGE_LLM_MODEL_SOC_MODEL") == "77"  # render inspected the bundle
    import shutil

    shutil.copytree(bundle, Path(d.getVar("UNPACKDIR")) / "model" / bundle.name)
    _run(d, "do_edge_llm_verify")
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    version = d.getVar("EDGE_LLM_MODEL_VERSION")
    vdir = dest / on_board.model_version_dir("nano", version).lstrip("/")
    meta = json.loads((vdir / on_board.MODEL_META).read_text())
    files = sorted(p.name for p in bundle.iterdir())
    assert sorted(f["path"] for f in meta["files"]) == files
    assert meta["size"] == sum(p.stat().st_size for p in bundle.iterdir())
    assert meta["qairt"] == "2.45.0.260326" and len(meta["sha256"]) == 64
    assert os.readlink(dest / on_board.model_current("nano").lstrip("/")) == version


def test_image_refuses_rootfs_without_enabled_cdsprpcd(tmp_path, distro_layer, fatal):
    import bb

    res = render(load_manifest(write_manifest(tmp_path / "m.yaml")), tmp_path / "out")
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", _env(tmp_path, distro_layer, res))
    rootfs = Path(d.getVar("IMAGE_ROOTFS"))
    unit = rootfs / "usr/lib/systemd/system/cdsprpcd.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    with pytest.raises(bb.BBHandledException):
        _run(d, "edge_llm_check_fastrpc")
    assert any("cdsprpcd.service is installed but not enabled" in m for m in fatal.messages)
    wants = rootfs / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "cdsprpcd.service").symlink_to("/usr/lib/systemd/system/cdsprpcd.service")
    _run(d, "edge_llm_check_fastrpc")


def test_litertlm_verify_reads_the_build_id_from_the_file(tmp_path, distro_layer, fatal):
    """Declared 2.44 (render trusted the manifest), file compiled for 2.45: do_edge_llm_verify refuses it."""
    import bb

    from provisioner.sim.synthetic_models import make_litertlm

    wrong = make_litertlm(tmp_path / "wrong" / "gemma.litertlm", qairt="2.45.0.260326")
    models = [{"name": "gemma-x", "kind": "litertlm", "qairt": "2.44.0.260225", "path": str(wrong)}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", models=models))
    with pytest.raises(RenderError) as refused:
        render(m, tmp_path / "refused")  # render inspects the file
    res = render(m, tmp_path / "out", inspect=False)
    recipe = next((res.out_dir / "layers" / "meta-edge-llm-release").rglob("*.bb"))
    d = bbparse.parse_recipe(recipe, _env(tmp_path, distro_layer, res))
    unpacked = Path(d.getVar("UNPACKDIR")) / "model" / wrong.name
    unpacked.parent.mkdir(parents=True)
    unpacked.write_bytes(wrong.read_bytes())
    with pytest.raises(bb.BBHandledException):
        _run(d, "do_edge_llm_verify")
    assert str(refused.value) in fatal.messages
    right = make_litertlm(tmp_path / "right" / "gemma.litertlm", qairt="2.44.0.260225")
    unpacked.write_bytes(right.read_bytes())
    _run(d, "do_edge_llm_verify")
