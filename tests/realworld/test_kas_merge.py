"""The rendered kas files merged with meta-qcom's REAL ci/ fragments by kas's own code, offline.

kas's ``IncludeHandler`` resolves and merges the includes exactly as ``kas build`` does;
``Config._get_conf_header`` writes ``local_conf_header`` into local.conf exactly as kas does
(``# <key>`` then the text, keys sorted). bitbake's own parser then evaluates that local.conf, followed
by the os-release.bb assignments (openembedded-core @ 06dd66e6,
meta/recipes-core/os-release/os-release.bb: ``OS_RELEASE_FIELDS = "ID ID_LIKE NAME VERSION VERSION_ID
VERSION_CODENAME PRETTY_NAME CPE_NAME"`` - no BUILD_ID - and ``BUILD_ID ?= "${DATETIME}"``) and an image
recipe that adds ``allow-root-login`` to IMAGE_FEATURES itself (meta-qcom-distro's
qcom-minimal-image.bb does), so what is asserted is what /etc/os-release and the image would get.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kas.config import Config
from kas.includehandler import IncludeHandler

from provisioner.errors import RenderError
from provisioner.image.render import MAIN_FILE, check_meta_qcom_entries_kept, render
from provisioner.manifest import load_manifest
from provisioner.plan import DEBUG_LOGIN_FEATURES
from tests.image import bbparse
from tests.image.kas_fixtures import META_QCOM_CI, write_manifest

OS_RELEASE_BB = """\
OS_RELEASE_FIELDS = "ID ID_LIKE NAME VERSION VERSION_ID VERSION_CODENAME PRETTY_NAME CPE_NAME"
BUILD_ID ?= "${DATETIME}"
"""
IMAGE_RECIPE = 'IMAGE_FEATURES += "allow-root-login"\n'
# oe-core bitbake.conf @ 06dd66e6: EXTRA_IMAGE_FEATURES reaches images through IMAGE_FEATURES
BITBAKE_CONF = 'DATETIME = "20261201000000"\nEXTRA_IMAGE_FEATURES ??= ""\nIMAGE_FEATURES += "${EXTRA_IMAGE_FEATURES}"\n'


def merged(top: Path) -> dict:
    """kas's merged configuration for ``top``, with meta-qcom = the real ci/ files at ef0004df."""
    config, missing = IncludeHandler([str(top)]).get_config(repos={"meta-qcom": str(META_QCOM_CI.parent)})
    assert missing == []
    return config


def local_conf(config: dict) -> str:
    """The local_conf_header part of local.conf, written by kas's own code."""
    return Config._get_conf_header(SimpleNamespace(_config=config), "local_conf_header")


def evaluate(tmp: Path, text: str):
    """bitbake's datastore after bitbake.conf stand-in, ``text`` (local.conf), os-release.bb and the image lines."""
    bbparse._stub_hashserv()
    import bb.data
    import bb.parse

    d = bb.data.init()
    for name, body in (("bitbake.conf", BITBAKE_CONF), ("local.conf", text), ("recipe.conf",
                                                                              OS_RELEASE_BB + IMAGE_RECIPE)):
        f = tmp / name
        f.write_text(body)
        d = bb.parse.handle(str(f), d, True)
    return d


def _render(tmp: Path, **image) -> tuple[Path, str]:
    kw = {"image": image} if image else {}
    m = load_manifest(write_manifest(tmp / "m.yaml", release="gemma4-e2b-iq8275-2026.11", **kw))
    out = tmp / "out"
    render(m, out)
    return out / MAIN_FILE, m.release


@pytest.fixture(autouse=True)
def _kas_context(realworld, tmp_path, monkeypatch):
    """kas's include code runs git through its global context (the one ``kas`` makes at startup)."""
    import kas.context

    assert (META_QCOM_CI / "base.yml").is_file()
    monkeypatch.setenv("KAS_WORK_DIR", str(tmp_path))
    monkeypatch.setattr(kas.context, "__context__", kas.context.Context(SimpleNamespace(no_color=True)))


def test_production_keeps_every_base_line_and_build_id_reaches_os_release(tmp_path):
    top, release = _render(tmp_path)
    text = local_conf(merged(top))
    base = yaml.safe_load((META_QCOM_CI / "base.yml").read_text())["local_conf_header"]
    for key, entry in base.items():
        assert f"# {key}\n{entry}" in text, f"meta-qcom base.yml entry {key!r} was replaced"
    d = evaluate(tmp_path, text)
    fields = d.getVar("OS_RELEASE_FIELDS").split()
    assert fields.count("BUILD_ID") == 1 and d.getVar("BUILD_ID") == release
    assert {"efi", "pam", "pni-names"} <= set(d.getVar("DISTRO_FEATURES").split())
    assert d.getVar("IMAGE_ROOTFS_EXTRA_SPACE") == "307200"
    assert 'WATCHDOG_RUNTIME_SEC:pn-systemd = "30"' in text
    features = set(d.getVar("IMAGE_FEATURES").split()) | set(d.getVar("EXTRA_IMAGE_FEATURES").split())
    assert not features & set(DEBUG_LOGIN_FEATURES)
    cmdline = [w for w in d.getVar("KERNEL_CMDLINE_EXTRA").split() if w.startswith("qcom_scm.download_mode=")]
    assert cmdline == ["qcom_scm.download_mode=0"]


def test_debug_image_keeps_meta_qcom_debug_login_and_ramdump(tmp_path):
    top, release = _render(tmp_path, variant="debug")
    d = evaluate(tmp_path, local_conf(merged(top)))
    assert set(DEBUG_LOGIN_FEATURES) <= set(d.getVar("IMAGE_FEATURES").split())
    assert d.getVar("BUILD_ID") == release and "BUILD_ID" in d.getVar("OS_RELEASE_FIELDS").split()
    cmdline = [w for w in d.getVar("KERNEL_CMDLINE_EXTRA").split() if w.startswith("qcom_scm.download_mode=")]
    assert cmdline == ["qcom_scm.download_mode=1"]


def test_an_entry_named_like_meta_qcoms_replaces_it_and_loses_build_id(tmp_path):
    """What a same-named entry does (this harness sees the defect), and validation refuses it."""
    top, _ = _render(tmp_path)
    cfg = yaml.safe_load(top.read_text())
    cfg["local_conf_header"]["os-release"] = 'BUILD_ID = "x"\n'
    top.write_text(yaml.safe_dump(cfg, sort_keys=False))
    config = merged(top)
    assert "BUILD_ID" not in evaluate(tmp_path, local_conf(config)).getVar("OS_RELEASE_FIELDS").split()
    with pytest.raises(RenderError, match="'os-release' replaces meta-qcom ci/base.yml's entry"):
        check_meta_qcom_entries_kept(config, [top], META_QCOM_CI)


def test_validation_accepts_the_real_base_yml(tmp_path):
    top, _ = _render(tmp_path)
    check_meta_qcom_entries_kept(merged(top), [top], META_QCOM_CI)


def test_ota_ostree_chains_meta_qcoms_sota_fragment_and_keeps_build_id(tmp_path):
    """image.ota: ostree -> the real ci/qcom-distro-sota.yml (ef0004df) after the image include: its
    `distro: qcom-distro-sota` wins, meta-qcom's other entries and our BUILD_ID line stay."""
    import dataclasses

    m = load_manifest(write_manifest(tmp_path / "m.yaml", release="gemma4-e2b-iq8275-2026.11"))
    m = dataclasses.replace(m, image=dataclasses.replace(m.image, ota="ostree"))
    render(m, tmp_path / "out")
    config = merged(tmp_path / "out" / MAIN_FILE)
    assert config["distro"] == "qcom-distro-sota"
    assert "meta-updater" in config["repos"]  # sota.conf.inc's layer, from ci/qcom-distro.yml
    text = local_conf(config)
    base = yaml.safe_load((META_QCOM_CI / "base.yml").read_text())["local_conf_header"]
    for key, entry in base.items():
        assert f"# {key}\n{entry}" in text, f"meta-qcom base.yml entry {key!r} was replaced"
    d = evaluate(tmp_path, text)
    assert d.getVar("OS_RELEASE_FIELDS").split().count("BUILD_ID") == 1 and d.getVar("BUILD_ID") == m.release
