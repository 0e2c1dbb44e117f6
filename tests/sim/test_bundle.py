"""Synthetic qcomflash bundle: accepted by the station's preflight, rootfs holds the layout contract."""

from __future__ import annotations

import json
import subprocess

import pytest

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.station.bundle import preflight, read_contents
from provisioner.station.flashxml import boot_lun, find_flash_xml, parse_patch, parse_rawprogram

from .simcore import build_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_bundle(tmp_path_factory.mktemp("bundle"), release="rel-42", memlock="unlimited", download_mode=1)


def _debugfs_cat(img, path):
    res = subprocess.run(["debugfs", "-R", f"cat {path}", str(img)], capture_output=True, check=True)
    return res.stdout


def test_bundle_shape_matches_qcomflash(bundle):
    b = catalog.board("iq-8275-evk")
    assert bundle.name == f"edge-llm-image-{b.kas_machine}"
    raws, patches = find_flash_xml(bundle)
    assert [p.name for p in raws] == [f"rawprogram{n}.xml" for n in range(6)]
    programs = [p for x in raws for p in parse_rawprogram(x)]
    labels = {p.label: p for p in programs}
    assert labels["efi"].lun == 0 and labels["rootfs"].lun == 0 and labels["xbl_a"].lun == 1
    assert labels["xbl_b"].lun == 2 and labels["cdt"].lun == 3 and labels["uefi_a"].lun == 4
    assert labels["persist"].lun == 5 and labels["persist"].skipped
    assert boot_lun(programs) == 1
    assert all(p.sector_size == b.sector_size for p in programs)
    assert any(p.start_sector.startswith("NUM_DISK_SECTORS-") for p in programs)
    ops = [p for x in patches for p in parse_patch(x)]
    assert any(p.device_side for p in ops) and any(not p.device_side for p in ops)
    chips, storage = read_contents(bundle / "contents.xml")
    assert chips[0] in b.contents_chip_ids and storage == ["ufs"]
    assert (bundle / "prog_firehose_ddr.elf").read_bytes()[:4] == b"\x7fELF"


def test_station_preflight_accepts_it(bundle):
    pf = preflight(bundle, "iq-8275-evk", hash_files=False)
    bad = [c for c in pf.checks if not c.ok]
    assert bad == []


def test_rootfs_is_ext4_with_the_layout_contract(bundle):
    b = catalog.board("iq-8275-evk")
    img = bundle / "rootfs.img"
    assert img.stat().st_size < 32 << 20
    assert b'BUILD_ID="rel-42"' in _debugfs_cat(img, on_board.OS_RELEASE)
    rel = json.loads(_debugfs_cat(img, on_board.RELEASE_JSON))
    assert rel["release"] == "rel-42" and rel["qairt"] == ["2.44.0.260225"]
    for f in on_board.qairt_files(b, "2.44.0.260225", with_genie=False):
        assert b"2.44.0.260225" in _debugfs_cat(img, f), f
    assert b"SIMULATED litert_lm_main" in _debugfs_cat(img, f"{on_board.litert_dir()}/bin/litert_lm_main")
    model = rel["models"][0]
    meta = json.loads(_debugfs_cat(img, f"{on_board.model_version_dir('gemma-4-e2b', model['version'])}/model.json"))
    assert meta["sha256"] == model["sha256"] and meta["qairt"] == "2.44.0.260225"
    link = subprocess.run(["debugfs", "-R", f"stat {on_board.model_current('gemma-4-e2b')}", str(img)],
                          capture_output=True, text=True, check=True).stdout
    assert f'Fast link dest: "{model["version"]}"' in link
    assert b"memlock    unlimited" in _debugfs_cat(img, on_board.LIMITS_FILE)
    assert b"DefaultLimitMEMLOCK=infinity" in _debugfs_cat(img, on_board.SYSTEMD_MEMLOCK_DROPIN)
    assert b"qcom_scm.download_mode=1" in _debugfs_cat(img, "/etc/kernel/cmdline")
    assert b"fastrpc:x:" in _debugfs_cat(img, "/etc/group")
    assert b"[Service]" in _debugfs_cat(img, f"{on_board.SERVE_UNIT_DIR}/{on_board.SERVE_UNIT}")


# ---------------------------------------------------------------------------------------------- os-release
def _render_kas(tmp_path, release="rel-osr"):
    from provisioner.image.render import MAIN_FILE, render
    from provisioner.manifest import load_manifest
    from tests.image.kas_fixtures import write_manifest

    out = tmp_path / "render"
    render(load_manifest(write_manifest(tmp_path / "m.yaml", release=release)), out)
    return out / MAIN_FILE


def _virtual_os_release(tmp_path, kas_files):
    from provisioner.manifest import load_manifest
    from provisioner.sim.bundle import build_rootfs_tree
    from provisioner.sim.synthetic_models import make_litertlm
    from tests.image.kas_fixtures import write_manifest

    model = make_litertlm(tmp_path / "gemma.litertlm")
    m = load_manifest(write_manifest(tmp_path / "m.yaml", release="rel-osr", models=[
        {"name": "gemma-4-e2b", "kind": "litertlm", "path": str(model), "qairt": "2.44.0.260225"}]))
    tree = tmp_path / "tree"
    build_rootfs_tree(m, tree, {"gemma-4-e2b": model}, kas_files)
    return dict(ln.split("=", 1) for ln in (tree / on_board.OS_RELEASE.lstrip("/")).read_text().splitlines())


def test_virtual_os_release_follows_the_rendered_kas_files(tmp_path):
    osr = _virtual_os_release(tmp_path, [_render_kas(tmp_path)])
    assert osr["BUILD_ID"] == '"rel-osr"' and osr["ID"] == "qcom-distro"


def test_no_build_id_in_os_release_fields_means_no_build_id_on_the_virtual_board(tmp_path):
    """A kas file whose entry replaces meta-qcom's 'os-release' (kas merges by key): BUILD_ID is gone."""
    import yaml

    top = _render_kas(tmp_path)
    cfg = yaml.safe_load(top.read_text())
    cfg["local_conf_header"]["os-release"] = 'BUILD_ID = "rel-osr"\n'
    top.write_text(yaml.safe_dump(cfg, sort_keys=False))
    osr = _virtual_os_release(tmp_path, [top])
    assert "BUILD_ID" not in osr and osr["ID"] == "qcom-distro"


def test_simulated_meta_qcom_entry_is_the_real_base_yml_one(realworld_ci):
    """The simulator's stand-in for meta-qcom ci/base.yml @ ef0004df says what the real file says."""
    import yaml

    from provisioner.sim.bundle import META_QCOM_LOCAL_CONF

    real = yaml.safe_load((realworld_ci / "base.yml").read_text())["local_conf_header"]
    for key, text in META_QCOM_LOCAL_CONF.items():
        lines = [ln.strip() for ln in real[key].splitlines() if ln.strip() and not ln.strip().startswith("#")]
        assert lines == text.splitlines()


@pytest.fixture
def realworld_ci():
    from tests.image.kas_fixtures import meta_qcom_ci

    return meta_qcom_ci()


def test_release_json_is_the_one_the_image_writes(bundle):
    """The virtual image's /etc/edge-llm/release.json (its own writer, provisioner/sim/bundle.py) is the
    document the real image writes for the same manifest: what render puts in EDGE_LLM_RELEASE_JSON."""
    from provisioner.manifest import load_manifest
    from provisioner.plan import make_plan

    on_the_board = json.loads(_debugfs_cat(bundle / "rootfs.img", on_board.RELEASE_JSON))
    image_writes = make_plan(load_manifest(bundle.parent.parent / "manifest.yaml")).release_json()
    assert sorted(on_the_board) == sorted(image_writes)
    on_board_models, image_models = on_the_board.pop("models"), image_writes.pop("models")
    assert on_the_board == image_writes
    assert len(on_board_models) == len(image_models) == 1
    for got, want in zip(on_board_models, image_models, strict=True):
        assert sorted(got) == sorted(want)
        # what the model is agrees; its version, digest and size are render's only when the manifest gives a
        # sha256 (else a fallback version), where the virtual image names the version by the file's digest
        assert {k: got[k] for k in ("name", "kind", "qairt")} == {k: want[k] for k in ("name", "kind", "qairt")}
        assert isinstance(got["version"], str) and isinstance(want["version"], str)
