"""meta-edge-llm in an OSTree (sota) image: the /opt trees live under /usr and are linked at boot.

meta-updater's image_types_ostree.bbclass (uptane/meta-updater @ f0e1ccaf) replaces /opt with a link to
var/rootdirs/opt and deletes what the image put there, so a sota build must not leave QAIRT, LiteRT-LM or
models in /opt. The switch is the `sota` DISTRO_FEATURE (meta-updater conf/distro/sota.conf.inc @ f0e1ccaf,
required by meta-qcom-distro conf/distro/include/qcom-distro-sota.inc @ 775dc8c7).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from provisioner.contracts import board as on_board
from provisioner.image.render import render
from provisioner.manifest import load_manifest
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest

LAYER = bbparse.LAYER
SOTA = 'DISTRO_FEATURES = "systemd usrmerge sota"\n'
PLAIN = 'DISTRO_FEATURES = "systemd usrmerge"\n'
STORE = "/usr/lib/edge-llm"
QAIRT = "2.45.0.260326"


def _env(tmp_path: Path, local: str, result=None, machine: str = "iq-8275-evk") -> Path:
    import yaml

    extra: tuple[Path, ...] = (bbparse.QCOM_DISTRO_FIXTURE,)
    if result is not None:
        extra += (result.out_dir / "layers" / "meta-edge-llm-release",)
        cfg = yaml.safe_load(result.kas_file.read_text())
        local = "".join(cfg["local_conf_header"][k] for k in sorted(cfg["local_conf_header"])) + local
    return bbparse.make_env(tmp_path, extra, local_conf=local + 'DEBUG_LOGIN = "x"\n', machine=machine)


def _run(d, func: str) -> None:
    import bb.build

    for var in ("T", "D", "UNPACKDIR"):
        os.makedirs(d.getVar(var), exist_ok=True)
    bb.build.exec_func(func, d)


def _install(d) -> Path:
    """do_install and its postfuncs, in the order bitbake's task runner calls them."""
    _run(d, "do_install")
    for f in (d.getVarFlag("do_install", "postfuncs") or "").split():
        _run(d, f)
    return Path(d.getVar("D"))


def _installed(dest: Path) -> list[str]:
    return sorted("/" + p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() or p.is_symlink())


def _packaged(d, pkg: str, path: str) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in (d.getVar("FILES:" + pkg) or "").split())


def _tmpfiles(dest: Path, pn: str) -> list[list[str]]:
    text = (dest / f"usr/lib/tmpfiles.d/edge-llm-{pn}.conf").read_text()
    return [line.split() for line in text.splitlines() if line and not line.startswith("#")]


def _qairt(tmp_path: Path, local: str):
    d = bbparse.parse_recipe(LAYER / f"recipes-ai/qairt/qairt-runtime-{QAIRT}.bb", _env(tmp_path, local))
    s = Path(d.getVar("S"))
    for rel in ("lib/aarch64-oe-linux-gcc11.2/libQnnHtp.so", "lib/aarch64-oe-linux-gcc11.2/libGenie.so",
                "lib/hexagon-v73/unsigned/libQnnHtpV73Skel.so", "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so",
                "bin/aarch64-oe-linux-gcc11.2/genie-t2t-run"):
        (s / rel).parent.mkdir(parents=True, exist_ok=True)
        (s / rel).write_bytes(b"\x7fELF fixture")
    (s / "LICENSE.pdf").write_bytes(b"%PDF")
    return d, _install(d)


def test_qairt_in_a_sota_image_lives_under_usr_and_is_linked_from_opt(tmp_path):
    d, dest = _qairt(tmp_path, SOTA)
    files = _installed(dest)
    qdir = on_board.qairt_dir(QAIRT)
    assert f"{STORE}{qdir}/VERSION" in files
    assert not any(f.startswith("/opt/") for f in files)  # nothing the OSTree commit would drop
    pn = f"qairt-runtime-{QAIRT}"
    conf = f"/usr/lib/tmpfiles.d/edge-llm-{pn}.conf"
    assert conf in files and _packaged(d, pn, conf)
    assert _packaged(d, f"{pn}-hexagon-v75", f"{STORE}{qdir}/lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so")
    lines = _tmpfiles(dest, pn)
    assert ["d", on_board.QAIRT_ROOT, "0755", "root", "root", "-"] in lines  # a real dir: the fleet adds builds
    assert ["L+", qdir, "-", "-", "-", "-", f"{STORE}{qdir}"] in lines  # re-pointed by every deployment


def test_qairt_without_sota_stays_in_opt_and_ships_no_snippet(tmp_path):
    d, dest = _qairt(tmp_path, PLAIN)
    files = _installed(dest)
    assert f"{on_board.qairt_dir(QAIRT)}/VERSION" in files
    assert not any(f.startswith("/usr/") for f in files)
    assert d.getVar("EDGE_LLM_TMPFILES_CONF") == ""


@pytest.mark.parametrize("local,root", [(SOTA, STORE), (PLAIN, "")])
def test_litert_runtime_install_root_follows_sota(local, root, tmp_path):
    d = bbparse.parse_recipe(LAYER / "recipes-ai/litert-lm/litert-lm-runtime.bb", _env(tmp_path, local))
    s = Path(d.getVar("S"))
    for f in on_board.LITERT_FILES:
        (s / f).parent.mkdir(parents=True, exist_ok=True)
        (s / f).write_bytes(b"\x7fELF")
    patches = Path(d.getVar("UNPACKDIR")) / "patches"
    patches.mkdir(parents=True)
    for p in d.getVar("LITERT_LM_PATCHES").split():
        (patches / p).write_text("patch\n")
    dest = _install(d)
    files = _installed(dest)
    lt = on_board.litert_dir()
    assert f"{root}{lt}/bin/litert_lm_main" in files
    assert _packaged(d, "litert-lm-runtime", f"{root}{lt}/bin/litert_lm_main")
    if root:
        assert not any(f.startswith("/opt/") for f in files)
        assert ["L+", lt, "-", "-", "-", "-", f"{STORE}{lt}"] in _tmpfiles(dest, "litert-lm-runtime")
        assert _packaged(d, "litert-lm-runtime", "/usr/lib/tmpfiles.d/edge-llm-litert-lm-runtime.conf")
    else:
        assert not (dest / "usr").exists()


def test_model_in_a_sota_image_links_version_and_keeps_the_fleets_current(tmp_path):
    from provisioner.sim.synthetic_models import make_genie_bundle

    bundle = make_genie_bundle(tmp_path / "nano-bundle", soc_model=77, dsp_arch="v73")
    models = [{"name": "nano", "kind": "genie", "qairt": QAIRT, "path": str(bundle)}]
    m = load_manifest(write_manifest(tmp_path / "m.yaml", board="iq-9075-evk", qairt=(QAIRT,), models=models))
    res = render(m, tmp_path / "out")
    recipe = next((res.out_dir / "layers" / "meta-edge-llm-release").rglob("*.bb"))
    d = bbparse.parse_recipe(recipe, _env(tmp_path, SOTA, res, machine="iq-9075-evk"))
    import shutil

    shutil.copytree(bundle, Path(d.getVar("UNPACKDIR")) / "model" / bundle.name)
    dest = _install(d)
    version = d.getVar("EDGE_LLM_MODEL_VERSION")
    vdir = on_board.model_version_dir("nano", version)
    files = _installed(dest)
    assert f"{STORE}{vdir}/{on_board.MODEL_META}" in files
    assert not any(f.startswith("/opt/") for f in files)
    pn = d.getVar("PN")
    assert _packaged(d, pn, f"/usr/lib/tmpfiles.d/edge-llm-{pn}.conf")
    assert _packaged(d, pn, f"{STORE}{vdir}/{on_board.MODEL_META}")
    lines = _tmpfiles(dest, pn)
    assert ["d", on_board.model_dir("nano"), "0755", "root", "root", "-"] in lines
    assert ["L+", vdir, "-", "-", "-", "-", f"{STORE}{vdir}"] in lines
    # `L` without `+`: a model the fleet switched `current` to survives the next boot
    assert ["L", on_board.model_current("nano"), "-", "-", "-", "-", version] in lines


@pytest.mark.parametrize("local,refused", [(SOTA, True), (PLAIN, False)])
def test_sota_image_fails_when_anything_is_left_in_opt(local, refused, tmp_path):
    import bb

    res = render(load_manifest(write_manifest(tmp_path / "m.yaml")), tmp_path / "out")
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", _env(tmp_path, local, res))
    assert "edge_llm_check_opt_empty" in d.getVar("IMAGE_PREPROCESS_COMMAND").split()
    rootfs = Path(d.getVar("IMAGE_ROOTFS"))
    (rootfs / "opt/vendor").mkdir(parents=True)
    (rootfs / "opt/vendor/tool").write_text("x")
    h = bbparse.BitbakeErrors()
    logging.getLogger("BitBake").addHandler(h)
    try:
        if refused:
            with pytest.raises(bb.BBHandledException):
                _run(d, "edge_llm_check_opt_empty")
            assert any("/opt/vendor/tool" in m and "under /usr" in m for m in h.messages)
        else:
            _run(d, "edge_llm_check_opt_empty")
        (rootfs / "opt/vendor/tool").unlink()
        (rootfs / "opt/vendor").rmdir()
        _run(d, "edge_llm_check_opt_empty")  # an empty /opt is what the commit expects
    finally:
        logging.getLogger("BitBake").removeHandler(h)


# --- boot assessment: a deployment without FastRPC or its trees is never blessed ----------------------


def test_only_a_sota_image_gets_the_boot_check(tmp_path):
    deps = {}
    for name, local in (("sota", SOTA), ("plain", PLAIN)):
        d = bbparse.parse_recipe(LAYER / "recipes-core/packagegroups/packagegroup-edge-llm.bb",
                                 _env(tmp_path / name, local))
        deps[name] = set(d.getVar("RDEPENDS:packagegroup-edge-llm").split())
    assert "edge-llm-boot-check" in deps["sota"]
    assert "edge-llm-boot-check" not in deps["plain"]


def _boot_check(tmp_path: Path) -> tuple[str, Path]:
    """The installed unit text and the installed check script."""
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-boot-check/edge-llm-boot-check.bb", _env(tmp_path, SOTA))
    unpack = Path(d.getVar("UNPACKDIR"))
    unpack.mkdir(parents=True, exist_ok=True)
    for src in (LAYER / "recipes-core/edge-llm-boot-check/files").iterdir():
        (unpack / src.name).write_bytes(src.read_bytes())
    dest = _install(d)
    unit = (dest / "usr/lib/systemd/system/edge-llm-boot-check.service").read_text()
    return unit, dest / "usr/libexec/edge-llm-boot-check"


def test_boot_check_unit_gates_boot_complete_with_the_layout_paths(tmp_path):
    unit, script = _boot_check(tmp_path)
    lines = unit.splitlines()
    assert "Before=boot-complete.target" in lines and "RequiredBy=boot-complete.target" in lines
    assert (f"ExecStart=/usr/libexec/edge-llm-boot-check {on_board.FASTRPC_DEVICE} {on_board.FASTRPC_SERVICE} "
            "/usr/lib/tmpfiles.d") in lines
    assert os.access(script, os.X_OK)


@pytest.mark.parametrize("service_active,tree_present,device,ok", [
    (True, True, "/dev/null", True),
    (False, True, "/dev/null", False),
    (True, False, "/dev/null", False),
    (True, True, "regular-file", False),
])
def test_boot_check_fails_on_what_breaks_inference(service_active, tree_present, device, ok, tmp_path):
    import subprocess

    _, script = _boot_check(tmp_path / "build")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(f"#!/bin/sh\nexit {0 if service_active else 3}\n")
    (bindir / "systemctl").chmod(0o755)
    tree = tmp_path / "store/qairt/2.45.0.260326"
    if tree_present:
        tree.mkdir(parents=True)
    link = tmp_path / "opt/qairt/2.45.0.260326"
    link.parent.mkdir(parents=True)
    link.symlink_to(tree)
    tmpfiles = tmp_path / "tmpfiles.d"
    tmpfiles.mkdir()
    snippet = f"d {link.parent} 0755 root root -\nL+ {link} - - - - {tree}\n"
    (tmpfiles / "edge-llm-qairt-runtime.conf").write_text(snippet)
    if device == "regular-file":
        device = str(tmp_path / "not-a-device")
        Path(device).write_text("")
    proc = subprocess.run([str(script), device, "cdsprpcd.service", str(tmpfiles)], capture_output=True, text=True,
                          env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert (proc.returncode == 0) is ok, proc.stderr
    if not ok:
        assert proc.stderr.startswith("edge-llm-boot-check: ")
        assert (str(link) in proc.stderr) is (not tree_present)
